/* conv_graph_spec.h - what a convolution through cuDNN's graph (backend)
 * API is made of, in plain C: a backend's spec of a pass (its data type
 * from the precision: float for fp32 in NCHW and in float32 NHWC), the
 * three tensors' dimensions, strides, unique ids and byte alignment for a
 * layout and a pass, the filter of
 * candidate plans by their numerical notes (PyTorch's Conv_v8.cpp rule),
 * the pick among timed plans, and the algo_cache key. cuda_conv_graph.c
 * turns these into cudnnBackend* descriptors; everything here is checked
 * without a GPU (tests/test_conv_graph_spec.c), in every build.
 *
 * Shapes (cuDNN's logical order, whatever the layout):
 *   x [n, c, h, w]   w [f, c, k, k]   y [n, f, oh, ow]
 * NCHW strides are row-major in that order; NHWC strides keep the channel
 * innermost (x [h*w*c, 1, w*c, c]; the filter KRSC [k*k*c, 1, k*c, c]).
 * The passes: forward x, w -> y; backward data w, dy -> dx (dx has x's
 * tensor, dy y's); backward filter x, dy -> dw (dw has w's tensor).
 */
#ifndef TT_CONV_GRAPH_SPEC_H
#define TT_CONV_GRAPH_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/algo_cache.h"
#include "backend/precision.h"

typedef enum { CG_LAYOUT_NCHW, CG_LAYOUT_NHWC } cg_layout;
typedef enum { CG_DTYPE_FLOAT, CG_DTYPE_BF16, CG_DTYPE_HALF } cg_dtype;

/* The unique ids of the variant pack: one per tensor of the graph (a pass
 * has three; its gradients take the id of the tensor whose shape they have). */
enum { CG_UID_X = 1, CG_UID_W = 2, CG_UID_Y = 3 };

/* cuDNN's numerical notes as bits (1 << cudnnBackendNumericalNote_t: the
 * values are cuDNN 9's, checked at compile time in cuda_conv_graph.c). */
enum {
    CG_NOTE_TENSOR_CORE = 1u << 0,
    CG_NOTE_DOWN_CONVERT_INPUTS = 1u << 1,
    CG_NOTE_REDUCED_PRECISION_REDUCTION = 1u << 2,
    CG_NOTE_FFT = 1u << 3,
    CG_NOTE_NONDETERMINISTIC = 1u << 4,
    CG_NOTE_WINOGRAD = 1u << 5,
};

/* One operation graph: a pass of one convolution shape. */
typedef struct {
    conv_pass pass;
    window_desc win;    /* n, c, h, w, f, k, stride, pad, oh, ow */
    cg_layout layout;
    cg_dtype dtype;     /* of x, w, y and their gradients; the compute type is float */
    bool tf32;          /* float data: tensor-core (TF32) plans allowed */
    bool deterministic; /* no plan with the NONDETERMINISTIC note */
    int align;          /* bytes (1..16): the alignment all three data pointers have */
} cg_spec;

/* One tensor of the graph. */
typedef struct {
    int64_t dims[4];
    int64_t strides[4];
    int64_t uid;
    int64_t align;
    int64_t elements; /* dims' product: the extent of the strides, no padding */
} cg_tensor;

/* The spec of a backend's pass: the data type the backend's convolutions
 * read and write (float for fp32, in NCHW or float32 NHWC; bf16 or half
 * for the 16-bit precisions), TF32 plans allowed only where tf32 (a float
 * tower's trainer.tf32), and the alignment of the three pointers. */
cg_spec cg_spec_make(conv_pass pass, const window_desc *d, cg_layout layout, prec_t prec,
                     bool tf32, bool deterministic, const void *const ptrs[3]);

/* The three tensors of s, in order x, w, y (x is dx and y is dy in the
 * backward passes, w is dw in backward filter). */
void cg_spec_tensors(const cg_spec *s, cg_tensor out[3]);

/* The largest power of two <= 16 that divides every one of n addresses
 * (PyTorch's getAlignment, taken over the three pointers). */
int cg_align_of(const void *const *ptrs, int n);

/* Whether a plan with these notes (CG_NOTE_* bits) may run for s: none
 * NONDETERMINISTIC when deterministic; for float data without tf32, none
 * that uses tensor cores or down-converts its inputs. */
bool cg_notes_allowed(const cg_spec *s, unsigned notes);

/* A finalized candidate plan, as the timing reports it. */
typedef struct {
    bool ok;          /* finalized and executed without an error */
    size_t ws_bytes;  /* its workspace */
    float time_ms;    /* median time; ignored when deterministic */
} cg_candidate;

/* The plan to keep: the fastest ok one within ws_limit (the first of equal
 * times), or in deterministic mode the first ok one within ws_limit,
 * untimed (a choice by timing could differ from run to run). -1 if none. */
int cg_pick(const cg_candidate *c, int n, bool deterministic, size_t ws_limit);

/* Whether the backend builds a graph for s at all: not for a deterministic
 * NCHW pass, whose plan would run untimed, and an NCHW graph plan can be
 * many times slower than the legacy API's choice (cudnn-frontend#169). */
bool cg_worth_trying(const cg_spec *s);

/* Whether the graph API's plan (graph_ms, timed) runs the pass rather than
 * the legacy API's algorithm (legacy_ms, timed by cudnnFind*AlgorithmEx):
 * when it is at least as fast; deterministic (both untimed): always. */
bool cg_prefer_graph(const cg_spec *s, float graph_ms, float legacy_ms);

/* The most plans finalized and timed per graph: finalizing can take a
 * second for a runtime-compiled engine (cudnn-frontend#1066). */
#define CG_MAX_PLANS 8

/* The algo_cache key of s: the legacy key's fields, plus the graph API,
 * the layout, the data type and the alignment. */
algo_key cg_spec_key(const cg_spec *s);

/* "forward", "backward data", "backward filter"; "NCHW", "NHWC";
 * "float", "bf16", "half" */
const char *cg_pass_name(conv_pass p);
const char *cg_layout_name(cg_layout l);
const char *cg_dtype_name(cg_dtype t);

#endif
