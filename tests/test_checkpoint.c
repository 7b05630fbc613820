/* test_checkpoint.c — the checkpoint readers trust nothing (issue 12, point 7):
 * every number in trainer_state.json, zero/index.json and manifest.json is
 * checked to be finite, whole where it counts, and in range, and a bad one is
 * refused naming its key; temporary files get unpredictable names and never
 * follow a planted symlink. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/fs.h"
#include "../src/core/json.h"
#include "../src/train/ckpt_state.h"
#include "../src/train/manifest.h"
#include "../src/train/selection.h"
#include "test.h"
#include "tmpdir.h"

static zt_ckpt_state good_state(void)
{
    zt_ckpt_state st;
    memset(&st, 0, sizeof st);
    st.step = 6;
    st.optimizer_steps = 5;
    st.hp = (zt_ckpt_hparams){.lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                              .max_grad_norm = 1.0, .schedule = ZT_LR_COSINE, .warmup_steps = 2, .max_steps = 10,
                              .global_batch = 4, .per_device_batch = 2, .grad_accum = 1, .block_size = 16,
                              .shuffle = 1, .seed = 0xfedcba9876543210ull, .data_tokens = 1024,
                              .data_digest = 0x0123456789abcdefull, .compute = ZT_BF16};
    st.samples_seen = 24;
    st.epoch = 0;
    st.scaler = (zt_loss_scaler){.scale = 32768, .cur_hysteresis = 1, .iter = 6, .last_overflow_iter = 3, .skipped = 1};
    st.plan = (zt_ckpt_plan){.face = "FSDP", .strategy = "FULL_SHARD (ZeRO-3)", .stage = 3, .world = 2,
                             .group_size = 2, .wrap = ZT_WRAP_TRANSFORMER, .min_num_params = 0, .master = ZT_F32,
                             .compute = ZT_BF16, .reduce = ZT_F32};
    snprintf(st.command_line, sizeof st.command_line, "ztrain train --max_steps 10");
    return st;
}

/* Parse text as trainer_state.json: the status, and the message in msg. */
static int parse_state(const char *text, zt_ckpt_state *st, char *msg, size_t cap)
{
    zt_json js;
    zt_err err = {0};
    int rc = zt_json_parse("trainer_state.json", "trainer state", text, strlen(text), 0, &js, &err);
    if (rc == ZT_OK) {
        rc = zt_ckpt_state_from_json("trainer_state.json", &js, st, &err);
        zt_json_free(&js);
    }
    snprintf(msg, cap, "%s", err.msg);
    return rc;
}

/* The good state with key (a.b for nested) of ztrain's state (Trainer's
 * stateful_callbacks.ztrain) replaced by the JSON value. */
static char *mutate(const char *key, const char *value)
{
    zt_ckpt_state st = good_state();
    char *text = zt_ckpt_state_to_json(&st);
    cJSON *root = cJSON_Parse(text);
    free(text);
    char k[64];
    snprintf(k, sizeof k, "%s", key);
    cJSON *ours = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "stateful_callbacks"), "ztrain");
    cJSON *obj = ours;
    char *dot = strchr(k, '.');
    if (dot) {
        *dot = 0;
        obj = cJSON_GetObjectItemCaseSensitive(ours, k);
    }
    const char *leaf = dot ? dot + 1 : k;
    cJSON *v = cJSON_Parse(value);
    if (cJSON_GetObjectItemCaseSensitive(obj, leaf))
        cJSON_ReplaceItemInObjectCaseSensitive(obj, leaf, v);
    else
        cJSON_AddItemToObject(obj, leaf, v);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

/* The file is Trainer's TrainerState (what TrainerState.load_from_json takes: its
 * fields only), ztrain's state one of its stateful_callbacks, and the selection's
 * keys as Trainer writes them; an older checkpoint (ztrain's state alone) still reads. */
static void test_state_is_trainers(void)
{
    zt_ckpt_state st = good_state(), back;
    zt_selection sel;
    zt_err err = {0};
    zt_select_args sa = {0, "loss", -1, 0, 0.0};
    ZT_CHECK(zt_selection_init(&sel, &sa, 1, NULL, 0, 0, &err) == ZT_OK);
    zt_selection_log_train(&sel, 2, 0.5, 3.25, 1.5, 1e-3);
    ZT_CHECK(zt_selection_on_eval(&sel, 2, 0.5, 3.0) == 0);
    st.sel = &sel;
    st.epoch_fraction = 1.5;
    char *text = zt_ckpt_state_to_json(&st), msg[1024];
    cJSON *root = cJSON_Parse(text);
    ZT_CHECK(cJSON_GetObjectItemCaseSensitive(root, "global_step")->valuedouble == 6);
    ZT_CHECK(cJSON_GetObjectItemCaseSensitive(root, "epoch")->valuedouble == 1.5);
    ZT_CHECK(cJSON_GetObjectItemCaseSensitive(root, "best_metric")->valuedouble == 3.0);
    ZT_CHECK(cJSON_GetObjectItemCaseSensitive(root, "best_global_step")->valuedouble == 2);
    ZT_CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "best_model_checkpoint")));
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "log_history");
    ZT_CHECK(cJSON_GetArraySize(h) == 2);
    ZT_CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(h, 0), "loss")->valuedouble == 3.25);
    ZT_CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(h, 1), "eval_loss")->valuedouble == 3.0);
    ZT_CHECK(!cJSON_GetObjectItemCaseSensitive(root, "step") && !cJSON_GetObjectItemCaseSensitive(root, "plan"));
    ZT_CHECK_MSG(parse_state(text, &back, msg, sizeof msg) == ZT_OK, "%s", msg);
    /* ztrain's state alone at the top: an older checkpoint */
    cJSON *ours = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "stateful_callbacks"),
                                                          "ztrain");
    char *old = cJSON_PrintUnformatted(ours);
    ZT_CHECK_MSG(parse_state(old, &back, msg, sizeof msg) == ZT_OK && back.step == 6, "%s", msg);
    /* Trainer's part is checked by name too */
    cJSON_AddItemToObject(ours, "step_count", cJSON_CreateNumber(1));
    cJSON_AddNumberToObject(root, "globl_step", 6);
    cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(root, "stateful_callbacks"), "ztrain", ours);
    char *bad = cJSON_PrintUnformatted(root);
    ZT_CHECK(parse_state(bad, &back, msg, sizeof msg) == ZT_EINPUT && strstr(msg, "unknown key globl_step"));
    free(bad);
    free(old);
    cJSON_Delete(root);
    free(text);
    zt_selection_free(&sel);
}

static void test_state_round_trip(void)
{
    zt_ckpt_state st = good_state(), back;
    char *text = zt_ckpt_state_to_json(&st), msg[1024];
    ZT_CHECK_MSG(parse_state(text, &back, msg, sizeof msg) == ZT_OK, "%s", msg);
    ZT_CHECK(back.step == 6 && back.optimizer_steps == 5 && back.samples_seen == 24);
    ZT_CHECK(back.hp.seed == st.hp.seed && back.hp.data_digest == st.hp.data_digest && back.hp.lr == 1e-3);
    ZT_CHECK(back.scaler.scale == 32768 && back.scaler.last_overflow_iter == 3 && back.scaler.skipped == 1);
    ZT_CHECK(back.plan.stage == 3 && back.plan.world == 2 && back.plan.compute == ZT_BF16);
    ZT_CHECK(!strcmp(back.command_line, st.command_line) && !strcmp(back.plan.strategy, st.plan.strategy));
    free(text);
}

/* Each bad value is refused with the key in the message (the values the issue
 * found: a negative step, 1e300 steps, a negative optimizer step count). */
static void test_state_rejects_bad_numbers(void)
{
    static const struct { const char *key, *value, *named; } cases[] = {
        {"step", "-3", "step must be"},
        {"step", "1e300", "step must be"},
        {"step", "2.5", "step must be a finite whole number"},
        {"step", "11", "step must be"}, /* past max_steps */
        {"optimizer_steps", "-5", "optimizer_steps must be"},
        {"optimizer_steps", "7", "optimizer_steps must be"}, /* more than step */
        {"step", "\"6\"", "step must be"},
        {"loss_scaler.scale", "0", "loss_scaler.scale must be"},
        {"loss_scaler.scale", "1e308", "loss_scaler.scale must be"},
        {"loss_scaler.cur_hysteresis", "1.5", "loss_scaler.cur_hysteresis must be"},
        {"loss_scaler.last_overflow_iter", "-2", "loss_scaler.last_overflow_iter must be"},
        {"loss_scaler.skipped", "99", "loss_scaler.skipped must be"},
        {"hyper_parameters.learning_rate", "-1", "hyper_parameters.learning_rate must be"},
        {"hyper_parameters.adam_beta2", "1", "hyper_parameters.adam_beta2 must be"},
        {"hyper_parameters.adam_epsilon", "0", "hyper_parameters.adam_epsilon must be"},
        {"hyper_parameters.global_batch_size", "0", "hyper_parameters.global_batch_size must be"},
        {"hyper_parameters.max_steps", "1e300", "hyper_parameters.max_steps must be"},
        {"hyper_parameters.seed", "42", "hyper_parameters.seed must be a string"},
        {"hyper_parameters.seed", "\"00000000000000zz\"", "hyper_parameters.seed must be 16"},
        {"hyper_parameters.lr_scheduler_type", "\"sideways\"", "lr_scheduler_type \"sideways\""},
        {"hyper_parameters.compute_dtype", "\"fp8\"", "hyper_parameters.compute_dtype must be fp32"},
        {"data_position.samples_seen", "23", "samples_seen 23 is not step 6 x global_batch_size 4"},
        {"rng.shuffle_seed", "\"0000000000000001\"", "rng.shuffle_seed differs"},
        {"plan.stage", "4", "plan.stage must be"},
        {"plan.group_size", "3", "plan.group_size 3 does not divide plan.world 2"},
        {"plan.wrap", "\"EVERYTHING\"", "plan.wrap \"EVERYTHING\""},
        {"plan.compensated", "1", "plan.compensated must be true or false"},
        {"version", "2", "version must be"},
        {"loss_scaler", "[]", "loss_scaler must be an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = mutate(cases[i].key, cases[i].value), msg[1024];
        zt_ckpt_state st;
        int rc = parse_state(text, &st, msg, sizeof msg);
        ZT_CHECK_MSG(rc == ZT_EINPUT && strstr(msg, cases[i].named), "%s = %s: rc %d, message: %s", cases[i].key,
                     cases[i].value, rc, msg);
        free(text);
    }
    char msg[1024];
    zt_ckpt_state st;
    ZT_CHECK(parse_state("{\"format\": \"ztrain-trainer-state\"}", &st, msg, sizeof msg) == ZT_EINPUT &&
             strstr(msg, "version is missing"));
}

static int parse_index(const char *text, zt_ckpt_index *ix, char *msg, size_t cap)
{
    zt_json js;
    zt_err err = {0};
    int rc = zt_json_parse("index.json", "index", text, strlen(text), 0, &js, &err);
    if (rc == ZT_OK) {
        rc = zt_ckpt_index_from_json("index.json", &js, ix, &err);
        zt_json_free(&js);
    }
    snprintf(msg, cap, "%s", err.msg);
    return rc;
}

static void test_index(void)
{
    const char *head = "{\"format\": \"ztrain-zero-index\", \"version\": 1, \"group_size\": 2, "
                       "\"master_dtype\": \"fp32\", \"compensated\": false, ";
    static const struct { const char *body, *named; } cases[] = {
        {"\"units\": [{\"numel\": 10, \"padded_numel\": 10}], \"params\": [{\"name\": \"a\", \"shape\": [2, 5], "
         "\"unit\": 0, \"offset\": 0}]}", NULL},
        {"\"units\": [{\"numel\": 10, \"padded_numel\": 11}], \"params\": [{\"name\": \"a\", \"shape\": [10], "
         "\"unit\": 0, \"offset\": 0}]}", "padded_numel 11 is not a multiple of group_size 2"},
        {"\"units\": [{\"numel\": 10, \"padded_numel\": 10}], \"params\": [{\"name\": \"a\", \"shape\": [10], "
         "\"unit\": 0, \"offset\": 1}]}", "params[0] (a) does not fit inside units[0]"},
        {"\"units\": [{\"numel\": 10, \"padded_numel\": 10}], \"params\": [{\"name\": \"a\", \"shape\": [10], "
         "\"unit\": 1, \"offset\": 0}]}", "params[0].unit must be"},
        {"\"units\": [{\"numel\": 10, \"padded_numel\": 10}], \"params\": [{\"name\": \"a\", \"shape\": [5], "
         "\"unit\": 0, \"offset\": 0}, {\"name\": \"a\", \"shape\": [5], \"unit\": 0, \"offset\": 5}]}",
         "parameter \"a\" appears twice"},
        {"\"units\": [{\"numel\": 10, \"padded_numel\": 10}], \"params\": [{\"name\": \"a\", \"shape\": [1e300, 1e300], "
         "\"unit\": 0, \"offset\": 0}]}", "params[0].shape[0] must be"},
        {"\"units\": [{\"numel\": -10, \"padded_numel\": 10}], \"params\": [{\"name\": \"a\", \"shape\": [1], \"unit\": 0, \"offset\": 0}]}", "units[0].numel must be"},
        {"\"units\": [{\"numel\": 10, \"padded_numel\": 10}], \"params\": []}", "1 units and 0 params"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024], msg[1024];
        snprintf(text, sizeof text, "%s%s", head, cases[i].body);
        zt_ckpt_index ix;
        int rc = parse_index(text, &ix, msg, sizeof msg);
        if (!cases[i].named) {
            ZT_CHECK_MSG(rc == ZT_OK && ix.nparams == 1 && ix.params[0].numel == 10, "%s", msg);
            if (rc == ZT_OK)
                zt_ckpt_index_free(&ix);
        } else {
            ZT_CHECK_MSG(rc == ZT_EINPUT && strstr(msg, cases[i].named), "case %zu: %s", i, msg);
        }
    }
}

static int parse_manifest(const char *files, char *msg, size_t cap)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"format\": \"ztrain-manifest\", \"version\": 1, \"hash\": \"xxh3-64\", "
             "\"files\": {%s}}", files);
    zt_json js;
    zt_err err = {0};
    zt_manifest m;
    int rc = zt_json_parse("manifest.json", "manifest", text, strlen(text), 0, &js, &err);
    if (rc == ZT_OK) {
        rc = zt_manifest_from_json("manifest.json", &js, &m, &err);
        zt_json_free(&js);
        if (rc == ZT_OK)
            zt_manifest_free(&m);
    }
    snprintf(msg, cap, "%s", err.msg);
    return rc;
}

static void test_manifest(void)
{
    static const struct { const char *files, *named; } cases[] = {
        {"\"zero/shard-0-of-1.safetensors\": {\"bytes\": 12, \"xxh3\": \"0123456789abcdef\"}", NULL},
        {"\"../etc/passwd\": {\"bytes\": 12, \"xxh3\": \"0123456789abcdef\"}", "is not a relative path"},
        {"\"/etc/passwd\": {\"bytes\": 12, \"xxh3\": \"0123456789abcdef\"}", "is not a relative path"},
        {"\"a//b\": {\"bytes\": 12, \"xxh3\": \"0123456789abcdef\"}", "is not a relative path"},
        {"\"a\": {\"bytes\": -1, \"xxh3\": \"0123456789abcdef\"}", "files.a.bytes must be"},
        {"\"a\": {\"bytes\": 1.5, \"xxh3\": \"0123456789abcdef\"}", "files.a.bytes must be"},
        {"\"a\": {\"bytes\": 1e300, \"xxh3\": \"0123456789abcdef\"}", "files.a.bytes must be"},
        {"\"a\": {\"bytes\": 1, \"xxh3\": \"0123\"}", "files.a.xxh3 must be"},
        {"\"a\": {\"bytes\": 1, \"xxh3\": \"0123456789abcdef\"}, \"a\": {\"bytes\": 1, \"xxh3\": \"0123456789abcdef\"}",
         "listed twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[1024];
        int rc = parse_manifest(cases[i].files, msg, sizeof msg);
        if (!cases[i].named)
            ZT_CHECK_MSG(rc == ZT_OK, "%s", msg);
        else
            ZT_CHECK_MSG(rc == ZT_EINPUT && strstr(msg, cases[i].named), "case %zu: %s", i, msg);
    }
}

/* A symlink planted where the output goes is replaced, never followed, and the
 * temporary names are unpredictable and created exclusively. */
static void test_temporary_files(void)
{
    char dir[256], victim[300], target[300], t1[400], t2[400];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_ckpt_tmp_") != NULL);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(target, sizeof target, "%s/model.safetensors", dir);
    write_bytes(victim, "precious", 8);
    ZT_CHECK(symlink(victim, target) == 0);
    zt_err err = {0};
    zt_wpart part = {"new", 3};
    ZT_CHECK_MSG(zt_write_atomic(target, &part, 1, &err) == ZT_OK, "%s", err.msg);
    char buf[16] = {0};
    FILE *f = fopen(victim, "rb");
    ZT_CHECK(f && fread(buf, 1, sizeof buf, f) == 8 && !memcmp(buf, "precious", 8));
    if (f)
        fclose(f);
    struct stat sb;
    ZT_CHECK(lstat(target, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 3);
    int a = zt_create_temp(target, t1, sizeof t1), b = zt_create_temp(target, t2, sizeof t2);
    ZT_CHECK(a >= 0 && b >= 0 && strcmp(t1, t2) != 0 && strlen(t1) == strlen(target) + 18);
    close(a);
    close(b);
    tmpdir_remove(dir);
}

int main(void)
{
    ZT_RUN(test_state_is_trainers);
    ZT_RUN(test_state_round_trip);
    ZT_RUN(test_state_rejects_bad_numbers);
    ZT_RUN(test_index);
    ZT_RUN(test_manifest);
    ZT_RUN(test_temporary_files);
    ZT_TEST_MAIN_END();
}
