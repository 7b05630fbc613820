/* bpe_train.h — train a byte-level BPE tokenizer and write it as Hugging Face
 * files (tokenizer.json, tokenizer_config.json, special_tokens_map.json) that
 * `tokenizers` and `transformers.AutoTokenizer` load.
 *
 * The tokenizer: Llama-3's split pattern, then GPT-2's byte-to-char map;
 * id 0 is the special token <|endoftext|> (bos and eos), ids 1..256 the bytes
 * 0..255, then one token per merge, most frequent pair first.  Training is
 * deterministic: ties between equally frequent pairs go to the smaller
 * (left id, right id), and nothing depends on threads, time or addresses, so
 * the same input gives byte-identical files. */
#ifndef ZT_BPE_TRAIN_H
#define ZT_BPE_TRAIN_H

#include "../core/status.h"

typedef struct zt_bpe_train_report {
    long bytes;        /* training text */
    long words;        /* distinct pre-tokenized pieces */
    int vocab_size;    /* reached (less than asked when the text runs out of pairs) */
    int merges;
} zt_bpe_train_report;

#define ZT_BPE_EOS "<|endoftext|>"

int zt_bpe_train(const char *const *paths, int n_paths, int vocab_size, const char *out_dir,
                 zt_bpe_train_report *rep, zt_err *err);

#endif
