/* commands.h — commands implemented outside main.c. */
#ifndef ZT_COMMANDS_H
#define ZT_COMMANDS_H

#include <stddef.h>

#include "../core/status.h"
#include "../text/text_data.h"

struct zt_comm;

const char *zt_version(void);
int zt_cli_set_threads(int threads); /* 0: the cores this process may use; returns the count */
int zt_cmd_env(int argc, char **argv, zt_err *err);
int zt_cmd_launch(int argc, char **argv, zt_err *err);
/* Run mpirun (args, NULL-terminated) as a child, relaying SIGINT, SIGTERM and
 * SIGHUP to it; with `graceful` (the command is train) a first SIGTERM or SIGINT
 * becomes the ranks' stop request, SIGUSR2 (launch_run.c says why).  nranks is
 * for the message (0: unknown).  zt_launch_exit_code is the exit status the
 * launcher should end with afterwards (-1: not run). */
int zt_launch_run(char **args, int nranks, int graceful, zt_err *err);
int zt_launch_exit_code(void);
int zt_cmd_config(int argc, char **argv, zt_err *err);
int zt_cmd_estimate_memory(int argc, char **argv, zt_err *err);
int zt_cmd_tokenize(int argc, char **argv, zt_err *err);
int zt_cmd_tokenizer(int argc, char **argv, zt_err *err);
/* Move the values after `flag` (up to the next --flag) out of argv into *list. */
int zt_cli_take_list(const char *flag, int *argc, char **argv, const char ***list);
int zt_cmd_generate(int argc, char **argv, zt_err *err);
int zt_cmd_chat(int argc, char **argv, zt_err *err);
/* train --assistant_only_loss: conversational records keep the loss on the
 * assistant's tokens only ({% generation %} blocks of the chat template). */
void zt_cli_set_assistant_only(int on);
int zt_cmd_checkpoint(int argc, char **argv, zt_err *err);
int zt_cmd_merge_weights(int argc, char **argv, zt_err *err);
/* merge-adapter BASE ADAPTER OUT: LoRA adapters merged into the base's weights (merge_adapter.c). */
int zt_cmd_merge_adapter(int argc, char **argv, zt_err *err);
/* HF's size strings: "5GB" = 5*10^9 bytes, "200MB", "64KB", "1GiB" = 2^30, or bytes. */
int zt_cli_parse_size(const char *flag, const char *s, size_t *out, zt_err *err);
int zt_cmd_plot(int argc, char **argv, zt_err *err);
int zt_cmd_convert(int argc, char **argv, zt_err *err);
/* --model FILE.gguf: the file's tokenizer files (tokenizer.json, tokenizer_config.json,
 * generation_config.json) written into a new private directory under $TMPDIR (or /tmp), its path in
 * dir (cap bytes), for the commands that read them from a model directory; dir is ""
 * when model is not a GGUF file.  The directory is removed when the process exits. */
int zt_cli_gguf_tokenizer_dir(const char *model, char *dir, size_t cap, zt_err *err);
int zt_cmd_export(int argc, char **argv, zt_err *err);

/* 1 if path is text to tokenize: .txt, or JSON Lines records (.jsonl, .json). */
int zt_cli_is_text(const char *path);
/* train/eval --data FILE --tokenizer DIR for text (.txt, .jsonl, .json; records'
 * text in o->text_field, documents bounded as o says: text/text_data.h): point *data at the cached ids (buf holds
 * the path) after checking the vocabulary fits model_vocab.  With a comm, rank 0
 * tokenizes first and the ranks agree on the outcome.  Prompt/completion records
 * also give a loss mask, its path in mask_buf (cap bytes; "" for other text);
 * with mask_buf NULL (a caller that cannot use one) they are refused. */
int zt_cli_text_data(const char **data, const zt_text_opts *o, const char *tok_dir, int model_vocab,
                     struct zt_comm *comm, int rank, int threads, char *buf, size_t cap, char *mask_buf,
                     zt_err *err);
/* train --data FILE...: each file's ids (text through the tokenizer as above;
 * JSON Lines without a tokenizer is refused), and for several files their
 * concatenation in the order given, cached by content (buf holds its path).
 * *data is the one stream to read; *mask (mask NULL: refused) the loss mask of
 * prompt/completion records (in mask_buf; several such files: their masks
 * joined as their ids are), else NULL.  Prompt/completion records beside plain
 * text are refused (plain text has no prompt: its mask would be a guess). */
int zt_cli_data_files(const char *const *files, int n, const zt_text_opts *o, const char *tok_dir, int model_vocab,
                      struct zt_comm *comm, int rank, int threads, const char **data, char *buf, size_t cap,
                      const char **mask, char *mask_buf, zt_err *err);

/* --packing (on) and --packing_strategy (NULL: not given) as *mode: ZT_PACK_* or 0
 * (wrapped, the stream's windows); ZT_EINPUT naming a strategy ztrain does not know,
 * or one given without --packing. */
int zt_cli_packing_mode(int on, const char *strategy, int say, int *mode, zt_err *err);
/* --padding_free and --packing (packing: ZT_PACK_*, 0 for --padding_free): the eos id
 * that ends each document of tok_dir's text (documents bounded as o says, which must
 * put eos after each), and with say the start-up line that says so; ZT_EINPUT naming
 * what is missing. */
int zt_cli_padding_free_eos(const char *tok_dir, const zt_text_opts *o, int say, int packing, int32_t *eos,
                            zt_err *err);

/* The flags of text_data.h's zt_text_opts (O: a zt_text_opts), with the names
 * transformers (encode's add_special_tokens) and TRL use. */
#define TEXT_OPTS_FLAGS(O)                                                                                      \
    {"text_field", ZT_FLAG_STR, &(O).text_field, "the string member of each JSON Lines record, or the column of a table, that holds its text (default text)", 1, 0, 0}, \
    {"add_special_tokens", ZT_FLAG_BOOL, &(O).add_special_tokens, "put the tokenizer's post_processor tokens (BOS, or BOS and EOS) around each document, as encode(text, add_special_tokens=True) (default true)", 1, 0, 0}, \
    {"eos_between_documents", ZT_FLAG_BOOL, &(O).eos_between_documents, "the eos token after each document that does not already end with it, as TRL's SFT (default true)", 1, 0, 0}

#endif
