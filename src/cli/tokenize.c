/* tokenize.c — `ztrain tokenize`: text files to a token stream with a Hugging
 * Face tokenizer.json (src/text/), written as .npy (int32) or .bin (uint16). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <time.h>

#include "../core/fs.h"
#include "../io/tokens.h"
#include "../text/text_data.h"
#include "../text/tokenizer.h"
#include "commands.h"
#include "flags.h"

/* `--input A B C`: every argument after --input up to the next flag is an
 * input file.  They are moved out of argv (into *inputs) so the flag parser
 * sees only flags.  Returns the number of inputs. */
int zt_cli_take_list(const char *flag, int *argc, char **argv, const char ***inputs)
{
    int n = 0, k = 0;
    *inputs = calloc((size_t)*argc + 1, sizeof **inputs);
    if (!*inputs)
        return -1;
    for (int i = 0; i < *argc; i++) {
        size_t fl = strlen(flag);
        if (!strncmp(argv[i], flag, fl) && argv[i][fl] == '=') { /* --input=A */
            (*inputs)[n++] = argv[i] + fl + 1;
            continue;
        }
        if (!strcmp(argv[i], flag)) {
            while (i + 1 < *argc && strncmp(argv[i + 1], "--", 2) != 0)
                (*inputs)[n++] = argv[++i];
            continue;
        }
        argv[k++] = argv[i];
    }
    *argc = k;
    return n;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int write_bin(const char *path, const zt_ids *ids, zt_err *err)
{
    uint16_t *u = malloc(ids->n ? ids->n * sizeof *u : 1);
    if (!u)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory for %zu tokens", path, ids->n);
    for (size_t i = 0; i < ids->n; i++)
        u[i] = (uint16_t)ids->v[i]; /* little-endian host (tokens.c checks) */
    zt_wpart part = {u, ids->n * sizeof *u};
    int rc = zt_write_atomic(path, &part, 1, err);
    free(u);
    return rc;
}

int zt_cmd_tokenize(int argc, char **argv, zt_err *err)
{
    const char *tok_dir = NULL, *output = NULL;
    zt_text_opts topts = ZT_TEXT_OPTS_DEFAULTS;
    int append_eos = 0, threads = 0;
    zt_flag flags[] = {
        {"tokenizer", ZT_FLAG_STR, &tok_dir, "directory with tokenizer.json (Hugging Face `tokenizers` format)", 1, 0, 0},
        {"input", ZT_FLAG_STR, NULL, "text files (UTF-8), one document each: --input A.txt B.txt ...; JSON Lines (.jsonl, .json), Parquet (.parquet), Arrow (.arrow, a save_to_disk directory): one document a record", 1, 0, 0},
        {"output", ZT_FLAG_STR, &output, "FILE.npy (int32) or FILE.bin (uint16, vocabulary <= 65536)", 1, 0, 0},
        {"append_eos", ZT_FLAG_BOOL, &append_eos, "the same as --eos_between_documents true (the default), kept for old scripts", 1, 0, 0},
        {"threads", ZT_FLAG_INT, &threads, "threads (default: the cores this process may use)", 0, 4096, 0},
        TEXT_OPTS_FLAGS(topts),
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]);
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, nflags, "usage: ztrain tokenize --tokenizer DIR --input FILE... --output FILE.npy|.bin [flags]\n"
                                      "Each document: the ids of `tokenizers`' encode(text) (add_special_tokens=True unless\n"
                                      "--add_special_tokens false), then eos unless --eos_between_documents false.");
        return ZT_OK;
    }
    const char **inputs = NULL;
    int n_in = zt_cli_take_list("--input", &argc, argv, &inputs);
    if (n_in < 0)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    /* --input is listed for --help; its values were taken out above */
    zt_flag rest[] = {flags[0], flags[2], flags[3], flags[4], flags[5], flags[6], flags[7]};
    int rc = zt_flags_parse(rest, 7, argc, argv, "ztrain tokenize", err);
    if (append_eos)
        topts.eos_between_documents = 1;
    if (!rc && (!tok_dir || !output || n_in == 0))
        rc = zt_fail(err, ZT_EINPUT, "ztrain tokenize: --tokenizer, --input (one or more files) and --output are required");
    const char *dot = output ? strrchr(output, '.') : NULL;
    int bin = dot && !strcasecmp(dot, ".bin");
    if (!rc && !bin && !(dot && !strcasecmp(dot, ".npy")))
        rc = zt_fail(err, ZT_EINPUT, "--output: %s: expected a .npy or .bin file name", output);
    zt_tokenizer *t = NULL;
    if (!rc)
        rc = zt_tok_load(tok_dir, &t, err);
    if (!rc && bin && zt_tok_vocab_size(t) > 65536)
        rc = zt_fail(err, ZT_EINPUT, "--output %s: .bin holds uint16 ids but the vocabulary has %d tokens (> 65536); use .npy",
                     output, zt_tok_vocab_size(t));
    zt_ids ids = {0};
    /* wall time, and CPU time of all threads: on a shared machine the second
     * says what the work cost when the first mostly measures waiting */
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (!rc) {
        char line[400];
        zt_text_describe_documents(t, &topts, line, sizeof line);
        fprintf(stderr, "%s\n", line);
        threads = zt_cli_set_threads(threads);
        rc = zt_text_tokenize_files(t, inputs, n_in, &topts, threads, &ids, err);
    }
    double dt = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (!rc && ids.n == 0)
        rc = zt_fail(err, ZT_EINPUT, "%s: the input holds no tokens (empty files)", inputs[0]);
    if (!rc)
        rc = bin ? write_bin(output, &ids, err) : zt_tokens_write_npy(output, ids.v, ids.n, err);
    if (!rc) {
        size_t bytes = 0; /* the files' sizes (a save_to_disk directory's are not counted) */
        for (int i = 0; i < n_in; i++) {
            struct stat st;
            if (stat(inputs[i], &st) == 0 && S_ISREG(st.st_mode))
                bytes += (size_t)st.st_size;
        }
        fprintf(stderr, "tokenized %d file%s, %zu bytes -> %zu tokens (%s, vocabulary %d) in %.3f s (%.1f MB/s, %d thread%s, %.3f CPU-s); wrote %s\n",
                n_in, n_in == 1 ? "" : "s", bytes, ids.n, zt_tok_family(t), zt_tok_vocab_size(t), dt,
                dt > 0 ? bytes / dt / 1e6 : 0.0, threads, threads == 1 ? "" : "s", cpu, output);
    }
    zt_ids_free(&ids);
    zt_tok_free(t);
    free(inputs);
    return rc;
}
