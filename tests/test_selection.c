/* test_selection.c — Trainer's model selection and EarlyStoppingCallback, held to
 * what transformers decides on the same eval losses (tests/fixtures/selection/,
 * tools/make_selection_fixtures.py), and the flags' refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/train/selection.h"
#include "test.h"

static void test_early_stopping_matches_transformers(void)
{
    FILE *f = fopen("tests/fixtures/selection/early_stopping.txt", "r");
    ZT_CHECK(f != NULL);
    if (!f)
        return;
    char line[1024];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        long patience;
        double threshold, v[16];
        int greater, n, off;
        ZT_CHECK(sscanf(line, "%ld %lf %d %d%n", &patience, &threshold, &greater, &n, &off) == 4 && n <= 16);
        char *p = line + off, *end;
        for (int k = 0; k < n; k++, p = end)
            v[k] = strtod(p, &end);
        long want_stop, want_step;
        double want_best;
        ZT_CHECK(sscanf(p, " | %ld %ld %lf", &want_stop, &want_step, &want_best) == 3);
        zt_select_args sa = {0, "eval_loss", greater, patience, threshold};
        zt_selection s;
        zt_err err = {0};
        ZT_CHECK(zt_selection_init(&s, &sa, 1, NULL, 0, 0, &err) == ZT_OK);
        long stop = 0;
        for (int k = 0; k < n && !stop; k++)
            if (zt_selection_on_eval(&s, k + 1, 0.0, v[k]))
                stop = k + 1;
        ZT_CHECK_MSG(stop == want_stop && s.best_step == want_step && s.best_metric == want_best,
                     "%s: stop %ld best %ld %g", line, stop, s.best_step, s.best_metric);
        zt_selection_free(&s);
        cases++;
    }
    fclose(f);
    ZT_CHECK(cases >= 40);
}

/* best_model_checkpoint: the best step's checkpoint, once it is saved */
static void test_best_checkpoint_follows_saves(void)
{
    zt_select_args sa = {1, NULL, -1, 0, 0.0};
    zt_selection s;
    zt_err err = {0};
    ZT_CHECK(zt_selection_init(&s, &sa, 1, "/nonexistent/out", 2, 2, &err) == ZT_OK);
    zt_selection_on_eval(&s, 2, 0.1, 3.0);
    zt_selection_on_save(&s, "/nonexistent/out", 2);
    ZT_CHECK(!strcmp(s.best_checkpoint, "/nonexistent/out/checkpoint-2"));
    zt_selection_on_eval(&s, 4, 0.2, 3.5); /* worse: the best stays at step 2 */
    zt_selection_on_save(&s, "/nonexistent/out", 4);
    ZT_CHECK(!strcmp(s.best_checkpoint, "/nonexistent/out/checkpoint-2") && s.best_step == 2);
    zt_selection_on_eval(&s, 6, 0.3, 2.0);
    zt_selection_on_save(&s, "/nonexistent/out", 6);
    ZT_CHECK(!strcmp(s.best_checkpoint, "/nonexistent/out/checkpoint-6") && s.best_metric == 2.0);
    zt_selection_free(&s);
}

static void test_flags_refused(void)
{
    static const struct { zt_select_args a; int have_eval; const char *out; long ev, sv; const char *hint; } cases[] = {
        {{0, "accuracy", -1, 0, 0}, 1, "o", 0, 0, "--metric_for_best_model accuracy"},
        {{0, NULL, -1, 3, 0}, 0, "o", 0, 0, "--early_stopping_patience needs evaluations"},
        {{1, NULL, -1, 0, 0}, 0, "o", 0, 0, "--load_best_model_at_end needs evaluations"},
        {{1, NULL, -1, 0, 0}, 1, NULL, 0, 0, "needs --output_dir"},
        {{1, NULL, -1, 0, 0}, 1, "o", 4, 6, "--save_steps 6 must be a multiple of --eval_steps 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zt_selection s;
        zt_err err = {0};
        ZT_CHECK_MSG(zt_selection_init(&s, &cases[i].a, cases[i].have_eval, cases[i].out, cases[i].ev, cases[i].sv,
                                       &err) == ZT_EINPUT && strstr(err.msg, cases[i].hint),
                     "case %zu: %s", i, err.msg);
        zt_selection_free(&s);
    }
}

int main(void)
{
    ZT_RUN(test_early_stopping_matches_transformers);
    ZT_RUN(test_best_checkpoint_follows_saves);
    ZT_RUN(test_flags_refused);
    ZT_TEST_MAIN_END();
}
