/* plot.c — the training log as an SVG chart, or that chart as a PNG (see plot.h). */
#include "plot.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* PNG needs librsvg and cairo; the Makefile defines ZT_HAVE_PNG when pkg-config
 * finds both (and NO_PNG=1 is not given).  Without them the SVG is unchanged and
 * a .png output is refused before the log is read (png_support). */
#ifdef ZT_HAVE_PNG
#include <cairo.h>
#include <librsvg/rsvg.h>
#endif

#include "../core/fs.h"
#include "../core/input.h"
#include "../core/mem.h"

/* ---- a growable text buffer --------------------------------------------- */

typedef struct text {
    char *p;
    size_t n, cap;
    int oom;
} text;

/* Room for `more` bytes (and a NUL) after t->n; 0, or -1 with t->oom set. */
static int reserve(text *t, size_t more)
{
    if (t->oom)
        return -1;
    if (t->p && t->n + more < t->cap)
        return 0;
    size_t cap = t->cap ? t->cap : 1 << 16;
    while (cap <= t->n + more)
        cap *= 2;
    char *p = zt_alloc(ZT_MEM_OTHER, cap);
    if (!p) {
        t->oom = 1;
        return -1;
    }
    if (t->n)
        memcpy(p, t->p, t->n);
    zt_free(ZT_MEM_OTHER, t->p, t->cap);
    t->p = p;
    t->cap = cap;
    return 0;
}

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0)
        t->oom = 1;
    if (k < 0 || reserve(t, (size_t)k))
        return;
    va_start(ap, fmt);
    vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    t->n += (size_t)k;
}

/* Text for SVG character data: & < > escaped, control bytes dropped. */
static void put_escaped(text *t, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '&') put(t, "&amp;");
        else if (c == '<') put(t, "&lt;");
        else if (c == '>') put(t, "&gt;");
        else if (c >= 0x20) put(t, "%c", c);
    }
}

/* ---- the log ----------------------------------------------------------------- */

enum { S_LOSS, S_EVAL, S_LR, S_GNORM, S_TPS, S_LOST, S_N };

typedef struct series {
    double *x, *y;
    int n, cap;
} series;

typedef struct run_log {
    series s[S_N];
    long steps;             /* training records */
} run_log;

/* A point; y NaN: absent, nothing drawn; y infinite: a gap (the log's null),
 * kept as a NaN point where the line breaks. */
static int push(series *s, double x, double y)
{
    if (isnan(y) || (isinf(y) && (s->n == 0 || isnan(s->y[s->n - 1]))))
        return ZT_OK; /* absent, or a gap with nothing before it to break */
    if (isinf(y))
        y = NAN;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *nx = zt_alloc(ZT_MEM_OTHER, (size_t)cap * sizeof(double));
        double *ny = zt_alloc(ZT_MEM_OTHER, (size_t)cap * sizeof(double));
        if (!nx || !ny) {
            zt_free(ZT_MEM_OTHER, nx, (size_t)cap * sizeof(double));
            zt_free(ZT_MEM_OTHER, ny, (size_t)cap * sizeof(double));
            return ZT_EFAIL;
        }
        if (s->n) {
            memcpy(nx, s->x, (size_t)s->n * sizeof(double));
            memcpy(ny, s->y, (size_t)s->n * sizeof(double));
        }
        zt_free(ZT_MEM_OTHER, s->x, (size_t)s->cap * sizeof(double));
        zt_free(ZT_MEM_OTHER, s->y, (size_t)s->cap * sizeof(double));
        s->x = nx;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return ZT_OK;
}

static void log_free(run_log *lg)
{
    for (int i = 0; i < S_N; i++) {
        zt_free(ZT_MEM_OTHER, lg->s[i].x, (size_t)lg->s[i].cap * sizeof(double));
        zt_free(ZT_MEM_OTHER, lg->s[i].y, (size_t)lg->s[i].cap * sizeof(double));
    }
}

/* A numeric field: NaN when absent, INFINITY when null (the trainer writes null
 * for a value it could not form, e.g. a step's loss that was not finite: a gap
 * in the line); ZT_EINPUT when present but not a finite number. */
static int field(const cJSON *o, const char *key, double *out, const char *path, long line, zt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = NAN;
    if (!v)
        return ZT_OK;
    if (cJSON_IsNull(v) && strcmp(key, "step") != 0) {
        *out = INFINITY;
        return ZT_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return zt_fail(err, ZT_EINPUT, "%s:%ld: \"%s\" is not a finite number", path, line, key);
    *out = v->valuedouble;
    return ZT_OK;
}

static int read_record(run_log *lg, const cJSON *o, const char *path, long line, zt_err *err)
{
    int has_eval = cJSON_HasObjectItem(o, "eval_loss"), has_loss = cJSON_HasObjectItem(o, "loss");
    if (!has_eval && !has_loss)
        return ZT_OK; /* a record of another kind */
    double step, v[S_N];
    int rc = field(o, "step", &step, path, line, err);
    if (rc == ZT_OK && isnan(step))
        rc = zt_fail(err, ZT_EINPUT, "%s:%ld: a %s record without \"step\"", path, line,
                     has_eval ? "eval" : "training");
    if (rc)
        return rc;
    if (has_eval)
        return (rc = field(o, "eval_loss", &v[S_EVAL], path, line, err)) ? rc : push(&lg->s[S_EVAL], step, v[S_EVAL]);
    static const char *keys[S_N] = {"loss", NULL, "lr", "grad_norm", "tokens_per_sec_per_device",
                                    "lost_update_fraction"};
    for (int i = 0; i < S_N; i++)
        if (keys[i] && (rc = field(o, keys[i], &v[i], path, line, err)))
            return rc;
    if (v[S_GNORM] < 0) /* the trainer logs a non-finite norm as -1 */
        v[S_GNORM] = NAN;
    lg->steps++;
    for (int i = 0; i < S_N; i++)
        if (keys[i] && push(&lg->s[i], step, v[i]))
            return zt_fail(err, ZT_EFAIL, "out of memory reading %s", path);
    return ZT_OK;
}

static int read_log(run_log *lg, const char *path, zt_err *err)
{
    int fd;
    struct stat st;
    int rc = zt_open_input(path, "the training log", &fd, &st, err);
    if (rc)
        return rc;
    size_t len = (size_t)st.st_size;
    char *buf = zt_alloc(ZT_MEM_OTHER, len + 1);
    if (!buf) {
        close(fd);
        return zt_fail(err, ZT_EFAIL, "out of memory reading %s", path);
    }
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, buf + got, len - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    buf[got] = '\0';
    long line = 0;
    for (char *p = buf; rc == ZT_OK && p < buf + got;) {
        char *end = memchr(p, '\n', (size_t)(buf + got - p));
        if (!end)
            end = buf + got;
        *end = '\0';
        line++;
        size_t n = strspn(p, " \t\r");
        if (p[n]) {
            cJSON *o = cJSON_Parse(p);
            if (!cJSON_IsObject(o))
                rc = zt_fail(err, ZT_EINPUT, "%s:%ld: not a JSON object (each line of a training log is one)",
                             path, line);
            else
                rc = read_record(lg, o, path, line, err);
            cJSON_Delete(o);
        }
        p = end + 1;
    }
    zt_free(ZT_MEM_OTHER, buf, len + 1);
    if (rc == ZT_OK && lg->steps == 0)
        rc = zt_fail(err, ZT_EINPUT, "%s: no training steps (records with \"step\" and \"loss\"): is it a "
                     "`train --log_jsonl` file?", path);
    return rc;
}

/* ---- drawing ------------------------------------------------------------------ */

/* A tick spacing of 1, 2 or 5 times a power of ten giving about n intervals. */
static double nice_step(double range, int n)
{
    double raw = range / n, p = pow(10.0, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

typedef struct line_spec {
    const series *s;
    const char *color, *label;
    int points; /* draw markers (sparse series such as eval) */
} line_spec;

typedef struct box {
    double x, y, w, h;
} box;

/* One panel: title, frame, ticks on both axes, and each series as a polyline
 * mapped from [x0, x1] x [y0, y1] into the plot area. */
static void panel(text *t, box b, const char *title, const line_spec *ls, int nl, double x0, double x1)
{
    const double ml = 64, mr = 16, mt = 26, mb = 30;
    box a = {b.x + ml, b.y + mt, b.w - ml - mr, b.h - mt - mb}; /* plot area */
    put(t, "<g>\n<text x=\"%.1f\" y=\"%.1f\" class=\"title\">", a.x, b.y + 16);
    put_escaped(t, title);
    put(t, "</text>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n", a.x, a.y, a.w,
        a.h);
    double y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < nl; i++)
        for (int k = 0; k < ls[i].s->n; k++) {
            y0 = fmin(y0, ls[i].s->y[k]);
            y1 = fmax(y1, ls[i].s->y[k]);
        }
    if (y0 > y1) {
        put(t, "<text x=\"%.1f\" y=\"%.1f\" class=\"none\">not in this log</text>\n</g>\n", a.x + a.w / 2,
            a.y + a.h / 2);
        return;
    }
    if (y1 - y0 < 1e-12 * fmax(1.0, fabs(y1))) { /* a flat series: a band around it */
        double pad = fabs(y1) > 0 ? 0.05 * fabs(y1) : 1.0;
        y0 -= pad;
        y1 += pad;
    }
    double xr = x1 > x0 ? x1 - x0 : 1.0, yr = y1 - y0;
#define PX(v) (a.x + ((v) - x0) / xr * a.w)
#define PY(v) (a.y + a.h - ((v) - y0) / yr * a.h)
    double ys = nice_step(yr, 4), xs = nice_step(xr, 6);
    for (double v = ceil(y0 / ys) * ys; v <= y1 + 1e-9 * yr; v += ys) {
        put(t, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", a.x, a.x + a.w, PY(v), PY(v));
        put(t, "<text x=\"%.1f\" y=\"%.1f\" class=\"ytick\">%.3g</text>\n", a.x - 6, PY(v) + 4,
            fabs(v) < 1e-12 * ys ? 0.0 : v);
    }
    for (double v = ceil(x0 / xs) * xs; v <= x1 + 1e-9 * xr; v += xs)
        put(t, "<text x=\"%.1f\" y=\"%.1f\" class=\"xtick\">%.6g</text>\n", PX(v), a.y + a.h + 16, v);
    for (int i = 0; i < nl; i++) {
        const series *s = ls[i].s;
        if (s->n == 0)
            continue;
        /* one polyline per run of points between gaps */
        for (int k = 0; k < s->n;) {
            put(t, "<polyline class=\"line\" stroke=\"%s\" points=\"", ls[i].color);
            for (; k < s->n && !isnan(s->y[k]); k++)
                put(t, "%.1f,%.1f ", PX(s->x[k]), PY(s->y[k]));
            put(t, "\"/>\n");
            while (k < s->n && isnan(s->y[k]))
                k++;
        }
        for (int k = 0; ls[i].points && k < s->n; k++)
            if (!isnan(s->y[k]))
                put(t, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>", PX(s->x[k]), PY(s->y[k]),
                    ls[i].color);
        if (nl > 1) { /* legend, top right */
            double lx = a.x + a.w - 150, ly = a.y + 16 + 16 * i;
            put(t, "\n<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>", lx,
                lx + 20, ly - 4, ly - 4, ls[i].color);
            put(t, "<text x=\"%.1f\" y=\"%.1f\" class=\"legend\">%s</text>\n", lx + 26, ly, ls[i].label);
        }
    }
#undef PX
#undef PY
    put(t, "</g>\n");
}

static void draw(text *t, const run_log *lg, const char *log_path)
{
    const double W = 960, H = 800, head = 40;
    double x0 = INFINITY, x1 = -INFINITY;
    for (int i = 0; i < S_N; i++)
        for (int k = 0; k < lg->s[i].n; k++) {
            x0 = fmin(x0, lg->s[i].x[k]);
            x1 = fmax(x1, lg->s[i].x[k]);
        }
    put(t, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
           "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
           "font-family=\"sans-serif\" font-size=\"12\">\n"
           "<style>.title{font-weight:bold;font-size:13px}.frame{fill:none;stroke:#444}"
           ".grid{stroke:#ddd}.ytick{text-anchor:end;fill:#333}.xtick{text-anchor:middle;fill:#333}"
           ".line{fill:none;stroke-width:1.5}.legend{fill:#222}.none{text-anchor:middle;fill:#999}</style>\n"
           "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"16\" y=\"26\" class=\"title\">",
        W, H, W, H);
    put_escaped(t, log_path);
    put(t, " — %ld training steps, %d evaluations (x axis: optimizer step)</text>\n", lg->steps, lg->s[S_EVAL].n);
    const double rh = (H - head) / 3, cw = W / 2;
    line_spec loss[] = {{&lg->s[S_LOSS], "#1f77b4", "train loss", 0}, {&lg->s[S_EVAL], "#d62728", "eval loss", 1}};
    line_spec lr[] = {{&lg->s[S_LR], "#2ca02c", "lr", 0}}, gn[] = {{&lg->s[S_GNORM], "#9467bd", "grad norm", 0}};
    line_spec tps[] = {{&lg->s[S_TPS], "#ff7f0e", "tokens/s", 0}};
    line_spec lost[] = {{&lg->s[S_LOST], "#8c564b", "lost", 0}};
    panel(t, (box){0, head, W, rh}, "loss (mean token cross-entropy)", loss, 2, x0, x1);
    panel(t, (box){0, head + rh, cw, rh}, "learning rate", lr, 1, x0, x1);
    panel(t, (box){cw, head + rh, cw, rh}, "gradient norm (before clipping)", gn, 1, x0, x1);
    panel(t, (box){0, head + 2 * rh, cw, rh}, "tokens/s per device", tps, 1, x0, x1);
    panel(t, (box){cw, head + 2 * rh, cw, rh}, "lost-update fraction (rounded away)", lost, 1, x0, x1);
    put(t, "</svg>\n");
}

/* ---- PNG: the same SVG, rasterised ------------------------------------------- */

#ifdef ZT_HAVE_PNG
static int png_support(zt_err *err)
{
    (void)err;
    return ZT_OK;
}

static cairo_status_t png_sink(void *closure, const unsigned char *data, unsigned int len)
{
    text *png = closure;
    if (reserve(png, len))
        return CAIRO_STATUS_NO_MEMORY;
    memcpy(png->p + png->n, data, len);
    png->n += len;
    return CAIRO_STATUS_SUCCESS;
}

/* librsvg renders the SVG text onto a cairo image surface of the SVG's own size
 * (ARGB32, white background from the chart's first rect), and cairo encodes it as
 * PNG into `png`.  The chart is the one drawn for .svg, pixel for its user unit. */
static int rasterise(const text *svg, text *png, const char *out_path, zt_err *err)
{
    GError *gerr = NULL;
    RsvgHandle *h = rsvg_handle_new_from_data((const guint8 *)svg->p, svg->n, &gerr);
    if (!h) {
        int rc = zt_fail(err, ZT_EFAIL, "%s: librsvg cannot read the chart: %s", out_path, gerr ? gerr->message : "?");
        g_clear_error(&gerr);
        return rc;
    }
    double w = 0, hgt = 0;
    int rc = ZT_OK;
    if (!rsvg_handle_get_intrinsic_size_in_pixels(h, &w, &hgt) || w < 1 || hgt < 1 || w > 1e4 || hgt > 1e4)
        rc = zt_fail(err, ZT_EFAIL, "%s: the chart has no usable size (%g x %g)", out_path, w, hgt);
    cairo_surface_t *surface = NULL;
    cairo_t *cr = NULL;
    if (rc == ZT_OK) {
        surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, (int)w, (int)hgt);
        cr = cairo_create(surface);
        RsvgRectangle viewport = {0, 0, w, hgt};
        if (cairo_status(cr) != CAIRO_STATUS_SUCCESS)
            rc = zt_fail(err, ZT_EFAIL, "%s: cairo: %s", out_path, cairo_status_to_string(cairo_status(cr)));
        else if (!rsvg_handle_render_document(h, cr, &viewport, &gerr))
            rc = zt_fail(err, ZT_EFAIL, "%s: librsvg cannot draw the chart: %s", out_path,
                         gerr ? gerr->message : "?");
    }
    if (rc == ZT_OK) {
        cairo_surface_flush(surface);
        cairo_status_t st = cairo_surface_write_to_png_stream(surface, png_sink, png);
        if (st != CAIRO_STATUS_SUCCESS)
            rc = zt_fail(err, ZT_EFAIL, "%s: cannot encode the PNG: %s", out_path, cairo_status_to_string(st));
    }
    if (cr)
        cairo_destroy(cr);
    if (surface)
        cairo_surface_destroy(surface);
    g_clear_error(&gerr);
    g_object_unref(h);
    return rc;
}
#else
static int png_support(zt_err *err)
{
    return zt_fail(err, ZT_EINPUT, "PNG output needs librsvg-2.0 and cairo, and this ztrain was built without "
                   "them (pkg-config found none, or NO_PNG=1); install librsvg2-dev and libcairo2-dev and rebuild, "
                   "or write FILE.svg");
}

static int rasterise(const text *svg, text *png, const char *out_path, zt_err *err)
{
    (void)svg, (void)png, (void)out_path;
    return png_support(err);
}
#endif

int zt_plot_log(const char *log_path, const char *out_path, zt_plot_format format, zt_err *err)
{
    run_log lg;
    memset(&lg, 0, sizeof lg);
    if (format == ZT_PLOT_PNG && png_support(err) != ZT_OK)
        return zt_wrap(err, "%s: ", out_path);
    int rc = read_log(&lg, log_path, err);
    if (rc == ZT_OK) {
        text svg = {0}, png = {0};
        draw(&svg, &lg, log_path);
        if (svg.oom)
            rc = zt_fail(err, ZT_EFAIL, "out of memory drawing %s", out_path);
        else if (format == ZT_PLOT_SVG)
            rc = zt_write_atomic(out_path, &(zt_wpart){svg.p, svg.n}, 1, err);
        else if ((rc = rasterise(&svg, &png, out_path, err)) == ZT_OK)
            rc = zt_write_atomic(out_path, &(zt_wpart){png.p, png.n}, 1, err);
        zt_free(ZT_MEM_OTHER, svg.p, svg.cap);
        zt_free(ZT_MEM_OTHER, png.p, png.cap);
    }
    log_free(&lg);
    return rc;
}
