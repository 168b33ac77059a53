/* conv_graph_spec.c - tensors, note filter, pick and key of a convolution
 * through cuDNN's graph API (conv_graph_spec.h says what each is). */
#include "backend/cuda/conv_graph_spec.h"

#include <string.h>

/* dims [a, b, c, d] (cuDNN's logical n, c, h, w order) with strides for the
 * layout: NCHW row-major; NHWC with b (the channel) innermost. */
static void set_tensor(cg_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, cg_layout l,
                       int64_t uid, int align)
{
    int64_t dims[4] = {a, b, c, d};
    memcpy(t->dims, dims, sizeof(dims));
    if (l == CG_LAYOUT_NHWC) {
        t->strides[0] = c * d * b;
        t->strides[1] = 1;
        t->strides[2] = d * b;
        t->strides[3] = b;
    } else {
        t->strides[0] = b * c * d;
        t->strides[1] = c * d;
        t->strides[2] = d;
        t->strides[3] = 1;
    }
    t->uid = uid;
    t->align = align;
    t->elements = a * b * c * d;
}

void cg_spec_tensors(const cg_spec *s, cg_tensor out[3])
{
    const window_desc *d = &s->win;
    set_tensor(&out[0], d->n, d->c, d->h, d->w, s->layout, CG_UID_X, s->align);
    set_tensor(&out[1], d->f, d->c, d->k, d->k, s->layout, CG_UID_W, s->align);
    set_tensor(&out[2], d->n, d->f, d->oh, d->ow, s->layout, CG_UID_Y, s->align);
}

cg_spec cg_spec_make(conv_pass pass, const window_desc *d, cg_layout layout, prec_t prec,
                     bool tf32, bool deterministic, const void *const ptrs[3])
{
    cg_dtype t = !prec_reduced(prec, PREC_OP_CONV) ? CG_DTYPE_FLOAT
                 : prec == PREC_BF16              ? CG_DTYPE_BF16
                                                  : CG_DTYPE_HALF;
    return (cg_spec){.pass = pass,
                     .win = *d,
                     .layout = layout,
                     .dtype = t,
                     .tf32 = tf32,
                     .deterministic = deterministic,
                     .align = cg_align_of(ptrs, 3)};
}

int cg_align_of(const void *const *ptrs, int n)
{
    int a = 16;
    for (int i = 0; i < n; i++) {
        uintptr_t p = (uintptr_t)ptrs[i];
        while (a > 1 && p % (uintptr_t)a != 0)
            a /= 2;
    }
    return a;
}

bool cg_notes_allowed(const cg_spec *s, unsigned notes)
{
    if (s->deterministic && (notes & CG_NOTE_NONDETERMINISTIC))
        return false;
    if (s->dtype == CG_DTYPE_FLOAT && !s->tf32 &&
        (notes & (CG_NOTE_TENSOR_CORE | CG_NOTE_DOWN_CONVERT_INPUTS)))
        return false;
    return true;
}

int cg_pick(const cg_candidate *c, int n, bool deterministic, size_t ws_limit)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!c[i].ok || c[i].ws_bytes > ws_limit)
            continue;
        if (deterministic)
            return i;
        /* NaN times (never measured) lose to any number */
        if (c[i].time_ms != c[i].time_ms)
            continue;
        if (best < 0 || c[i].time_ms < c[best].time_ms)
            best = i;
    }
    return best;
}

bool cg_worth_trying(const cg_spec *s)
{
    return !(s->deterministic && s->layout == CG_LAYOUT_NCHW);
}

bool cg_prefer_graph(const cg_spec *s, float graph_ms, float legacy_ms)
{
    return s->deterministic || graph_ms <= legacy_ms;
}

algo_key cg_spec_key(const cg_spec *s)
{
    bool tensor = s->dtype != CG_DTYPE_FLOAT || s->tf32;
    algo_key k = algo_key_make(s->pass, &s->win, tensor, s->deterministic);
    k.graph = 1;
    k.layout = (int)s->layout;
    k.dtype = (int)s->dtype;
    k.align = s->align;
    return k;
}

const char *cg_pass_name(conv_pass p)
{
    return p == CONV_PASS_FORWARD         ? "forward"
           : p == CONV_PASS_BACKWARD_DATA ? "backward data"
                                          : "backward filter";
}

const char *cg_layout_name(cg_layout l)
{
    return l == CG_LAYOUT_NHWC ? "NHWC" : "NCHW";
}

const char *cg_dtype_name(cg_dtype t)
{
    return t == CG_DTYPE_BF16 ? "bf16" : t == CG_DTYPE_HALF ? "half" : "float";
}
