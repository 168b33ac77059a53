/* weight_copies.h - the 16-bit copies of a tower's weights, made once per
 * step: the bookkeeping a device backend (CUDA, sim) keeps so that its
 * 16-bit convolutions and dense products read one copy of each weight
 * tensor per step instead of narrowing the float32 master weights at every
 * call (forward, and again in backward data).
 *
 * A tower registers its parameter block [params, params + count) floats at
 * setup (backend.h, dev->weights_add); the backend gives it a mirror of
 * `count` 16-bit elements, where each weight tensor's copy sits at the
 * tensor's own offset (a KRSC copy of a KCRS tensor is a permutation of its
 * elements: the same place). Each tower_step brackets itself with
 * weight_copies_step(begin) and (end). Inside a step, the first call that
 * reads a weight tensor converts it into the mirror (WC_CONVERT), and every
 * later call of that step reads the copy (WC_FRESH); outside a step, or for
 * a pointer in no registered block, the caller converts at each call as
 * before (WC_NONE).
 *
 * Why that is correct: every write of the master weights (the optimizer,
 * an upload, a copy from a parameter server, a checkpoint restore, a
 * session's initial values) happens outside the tower's steps, and is
 * queued on the tower's one queue before the step's first conversion, which
 * therefore reads it; inside a step the layers only read their weights
 * (they write activations, gradients and batchnorm statistics). So a copy
 * made at its first use in a step equals the conversion the call would make
 * itself, bit for bit, until the step ends. Each step starts with every
 * copy stale. Another model instance (an evaluation tower) has its own
 * block and mirror.
 *
 * Plain C, no device calls: the backend converts (sim_backend.c,
 * cuda_conv.c, cuda_backend.c); tests/test_weight_copies.c checks this on
 * the CPU. The environment's TT_WEIGHT_COPIES=each_call (a test switch)
 * makes every lookup a WC_CONVERT: today's per-call conversions, through
 * the same copies, for the bit-for-bit comparison. */
#ifndef TT_WEIGHT_COPIES_H
#define TT_WEIGHT_COPIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a copy's elements are ordered: as the master tensor (KCRS for a
 * filter, [out, in] for a dense weight), or a filter as KRSC (NHWC
 * convolutions). */
typedef enum { WC_AS_STORED, WC_KRSC } wc_order;

typedef enum {
    WC_NONE,    /* no copy: convert at this call, as without copies */
    WC_CONVERT, /* convert now, into the mirror at *offset; later calls of the step read it */
    WC_FRESH    /* the mirror at *offset holds this step's copy: read it */
} wc_answer;

/* One weight tensor met in a block: where, how ordered, and the step whose
 * values its copy holds (0: none). */
typedef struct {
    size_t offset, count;
    wc_order order;
    uint64_t made;
} wc_tensor;

/* One registered block. step counts the block's steps begun (from 1);
 * open: inside one. */
typedef struct {
    const float *params;
    size_t count;
    void *mirror;
    uint64_t step;
    bool open;
    wc_tensor *tensors;
    int n_tensors, cap_tensors;
} wc_block;

typedef struct {
    wc_block *blocks;
    int n_blocks, cap_blocks;
    bool each_call;       /* TT_WEIGHT_COPIES=each_call */
    uint64_t conversions; /* WC_CONVERT answers so far (tests count them) */
} weight_copies;

/* Reads TT_WEIGHT_COPIES ("each_call", or unset / "step"): 0, or -1 with
 * why (one line) for another value. */
int weight_copies_init(weight_copies *wc, char *why, size_t why_len);
void weight_copies_free(weight_copies *wc);

/* Registers [params, params + count) with the backend's mirror: 0, -1 when
 * out of host memory. A block already registered takes the new mirror. */
int weight_copies_add(weight_copies *wc, const float *params, size_t count, void *mirror);
/* Forgets the block; returns its mirror for the backend to free (NULL when
 * it was not registered). */
void *weight_copies_remove(weight_copies *wc, const float *params);

/* A step of the block begins (every copy stale from now) or ends. */
void weight_copies_step(weight_copies *wc, const float *params, bool begin);

/* The copy of the weight tensor w[count] in `order` (above). With
 * WC_CONVERT or WC_FRESH, *mirror and *offset (in elements) say where. */
wc_answer weight_copies_find(weight_copies *wc, const float *w, size_t count, wc_order order,
                             void **mirror, size_t *offset);

#endif
