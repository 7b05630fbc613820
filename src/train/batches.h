/* batches.h — which tokens each rank sees at each micro-step (contract §4).
 *
 * The stream t[0..n) is cut into windows of T+1 tokens, window i = t[i*T .. i*T+T]
 * (consecutive windows share one token: inputs are the first T, targets the last T),
 * so there are (n-1)/T windows.  Optimizer step s uses G = B*A*W samples,
 * k = s*G + j for j in [0, G); rank r at micro-step a takes
 * j in [(a*W + r)*B, (a*W + r + 1)*B).  Sample k reads window k mod nwin, or with
 * shuffling perm_e[k mod nwin] for epoch e = k / nwin, a seeded permutation that
 * depends only on (seed, e) — never on W — so a global batch is the same set of
 * samples at every world size. */
#ifndef ZT_BATCHES_H
#define ZT_BATCHES_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"
#include "../io/tokens.h"

typedef struct zt_batcher {
    const zt_tokens *tokens;
    int T;
    size_t nwin;
    int shuffle;
    uint64_t seed;
    long perm_epoch;     /* epoch whose permutation is in perm, -1 none */
    uint32_t *perm;      /* nwin entries when shuffling */
    /* padding-free (zt_batcher_set_padding_free): the eos that ends each document
     * (-1: off), and the positions of the last zt_batcher_fill (pos_n entries) */
    int32_t doc_eos;
    int *pos;
    size_t pos_n;
    /* packing (zt_batcher_set_packing): window w holds the documents
     * bin_docs[bin_off[w] .. bin_off[w+1]), document d = ids[doc_start[d] ..
     * + doc_len[d]) (truncated to T); ndocs of them, nwin bins */
    size_t ndocs, *doc_start, *bin_off, *bin_docs;
    int *doc_len;
} zt_batcher;

int zt_batcher_init(zt_batcher *b, const zt_tokens *tokens, int T, int shuffle, uint64_t seed,
                    const char *data_path, zt_err *err);
void zt_batcher_free(zt_batcher *b);

/* Fill inputs[B*T], targets[B*T] with samples k0 .. k0+B-1; with a loss mask,
 * a target whose token is masked out (a prompt token) is ZT_IGNORE_INDEX. */
void zt_batcher_fill(zt_batcher *b, long k0, int B, int *inputs, int *targets);
/* Padding-free windows (TRL's padding_free): inside each window a document starts at
 * the window's first token and after each eos token; zt_batcher_fill then also
 * writes b->pos (B*T: each token's position inside its document, 0 at its start)
 * for the model (zt_model_set_positions), and the target of a document's last
 * token, which would be the next document's first, is ZT_IGNORE_INDEX (as
 * transformers' DataCollatorWithFlattening labels it), so no example sees or
 * predicts another.  B: the most samples a fill takes. */
int zt_batcher_set_padding_free(zt_batcher *b, int32_t eos, int B, zt_err *err);
/* Packed windows (TRL's packing with its "bfd" strategy): the documents (each ends
 * at an eos; the tokens after the last eos are one more) are truncated to T tokens
 * (split: TRL's "bfd_split", cut into pieces of T, the last shorter, each a document
 * of its own) and placed, longest first (ties in stream order), each into the open
 * window with the least room that still fits it (ties: the window that got that
 * room first), else into a new window, as TRL's pack_dataset does with max_length
 * T.  The windows (in the order they were opened, shuffled per epoch as usual)
 * replace the stream's; a fill writes each document from position 0 with no target
 * from its last token, and the rest of a window is padding (eos, position 0, no
 * target).  B as above. */
int zt_batcher_set_packing(zt_batcher *b, int32_t eos, int B, int split, zt_err *err);

/* How many of the targets of samples k0 .. k0+n-1 count in the loss: n*T without
 * a loss mask.  The mean loss of a step divides by this over its G samples, as
 * TRL's completion-only loss divides by the completion tokens of the batch. */
long zt_batcher_count_targets(zt_batcher *b, long k0, long n);

/* First sample index of rank r's micro-batch a at optimizer step s. */
long zt_sample_index(long step, int micro, int rank, int B, int A, int W);

#endif
