/* jinja.h — a renderer for the subset of Jinja that Hugging Face chat templates
 * use, behaving as jinja2 in the environment transformers' apply_chat_template
 * builds (trim_blocks, lstrip_blocks, loop controls, raise_exception,
 * strftime_now, tojson without ASCII escapes, {% generation %} markers).
 *
 * A template is compiled once and rendered any number of times over variables
 * given as a JSON object (messages, add_generation_prompt, bos_token, ...).  A
 * construct outside the subset is refused at compile time naming the template
 * line; an error at render time (raise_exception, an undefined value used) is
 * ZT_EINPUT with the template's message.  docs/text.md lists the subset. */
#ifndef ZT_JINJA_H
#define ZT_JINJA_H

#include <stddef.h>
#include <time.h>

#include "../core/status.h"

struct cJSON;
typedef struct zt_jinja zt_jinja;

/* Compile src[0..len) (name is used in errors: a file path or "chat_template"). */
int zt_jinja_compile(const char *name, const char *src, size_t len, zt_jinja **out, zt_err *err);
void zt_jinja_free(zt_jinja *t);
/* 1 if the template marks the assistant's text with {% generation %}. */
int zt_jinja_has_generation(const zt_jinja *t);

/* A render's text and the byte ranges inside {% generation %} blocks. */
typedef struct zt_jinja_span {
    size_t start, end;
} zt_jinja_span;
typedef struct zt_jinja_out {
    char *text; /* NUL-terminated */
    size_t len;
    zt_jinja_span *gen;
    size_t ngen;
} zt_jinja_out;

/* Render over vars (a JSON object).  now is strftime_now's time (time(NULL) in
 * use; tests pass a fixed one). */
int zt_jinja_render(const zt_jinja *t, const struct cJSON *vars, time_t now, zt_jinja_out *out, zt_err *err);
void zt_jinja_out_free(zt_jinja_out *o);

#endif
