/* test_conv_graph_spec.c - the GPU-independent part of convolutions through
 * cuDNN's graph API (src/backend/cuda/conv_graph_spec.c) on the CPU: each
 * pass's tensors in NCHW and NHWC against offsets computed element by
 * element from the layout's definition, the alignment of pointers, the
 * numerical-note filter (PyTorch's Conv_v8.cpp rule), the pick among timed
 * plans, the cache key (layout, type and alignment each matter), and the
 * backend's spec of a pass (its type from the precision: float32 NHWC
 * included). */
#include <string.h>

#include "backend/cuda/conv_graph_spec.h"
#include "tt_test.h"

static const window_desc WIN = {.n = 3, .c = 5, .h = 7, .w = 6, .f = 4, .k = 3, .stride = 2,
                                .pad = 1, .oh = 4, .ow = 3};

/* The offset of element (a, b, y, x) of a tensor of dims [A, B, Y, X] (b is
 * the channel) in the layout, from its definition: NCHW [a][b][y][x], NHWC
 * [a][y][x][b]. */
static int64_t offset_ref(const int64_t *dims, cg_layout l, int64_t a, int64_t b, int64_t y,
                          int64_t x)
{
    if (l == CG_LAYOUT_NHWC)
        return ((a * dims[2] + y) * dims[3] + x) * dims[1] + b;
    return ((a * dims[1] + b) * dims[2] + y) * dims[3] + x;
}

/* every element's strided offset equals the definition's */
static bool strides_match(const cg_tensor *t, cg_layout l)
{
    const int64_t *d = t->dims, *s = t->strides;
    for (int64_t a = 0; a < d[0]; a++)
        for (int64_t b = 0; b < d[1]; b++)
            for (int64_t y = 0; y < d[2]; y++)
                for (int64_t x = 0; x < d[3]; x++)
                    if (a * s[0] + b * s[1] + y * s[2] + x * s[3] != offset_ref(d, l, a, b, y, x))
                        return false;
    return t->elements == d[0] * d[1] * d[2] * d[3];
}

static void test_tensors(void)
{
    /* bf16 and float (float32 NHWC, TT_CUDA_LAYOUT=nhwc): the strides
     * count elements, whatever their type */
    for (int l = CG_LAYOUT_NCHW; l <= 2 * CG_LAYOUT_NHWC + 1; l++) {
        cg_dtype dt = l > CG_LAYOUT_NHWC ? CG_DTYPE_FLOAT : CG_DTYPE_BF16;
        for (int p = CONV_PASS_FORWARD; p <= CONV_PASS_BACKWARD_FILTER; p++) {
            cg_spec s = {.pass = (conv_pass)p, .win = WIN, .layout = (cg_layout)(l % 2),
                         .dtype = dt, .align = 8};
            cg_tensor t[3];
            memset(t, 0xff, sizeof(t));
            cg_spec_tensors(&s, t);
            /* cuDNN's logical order: x [n, c, h, w], w [f, c, k, k], y [n, f, oh, ow] */
            int64_t want[3][4] = {{3, 5, 7, 6}, {4, 5, 3, 3}, {3, 4, 4, 3}};
            bool dims = true, strides = true, ids = true;
            for (int i = 0; i < 3; i++) {
                dims &= memcmp(t[i].dims, want[i], sizeof(want[i])) == 0;
                strides &= strides_match(&t[i], s.layout);
                ids &= t[i].align == 8;
            }
            ids &= t[0].uid == CG_UID_X && t[1].uid == CG_UID_W && t[2].uid == CG_UID_Y &&
                   CG_UID_X != CG_UID_W && CG_UID_W != CG_UID_Y && CG_UID_X != CG_UID_Y;
            tt_ok(dims, "%s %s %s: dims x [n,c,h,w], w [f,c,k,k], y [n,f,oh,ow]",
                  cg_dtype_name(dt), cg_layout_name(s.layout), cg_pass_name((conv_pass)p));
            tt_ok(strides, "%s %s %s: every element's strided offset is the layout's",
                  cg_dtype_name(dt), cg_layout_name(s.layout), cg_pass_name((conv_pass)p));
            tt_ok(ids, "%s %s %s: three distinct uids, the spec's alignment",
                  cg_dtype_name(dt), cg_layout_name(s.layout), cg_pass_name((conv_pass)p));
        }
    }
    /* NHWC keeps the channel innermost: stride 1 on dim 1 */
    cg_spec s = {.win = WIN, .layout = CG_LAYOUT_NHWC, .align = 16};
    cg_tensor t[3];
    cg_spec_tensors(&s, t);
    tt_ok(t[0].strides[1] == 1 && t[1].strides[1] == 1 && t[2].strides[1] == 1 &&
              t[1].strides[3] == WIN.c && t[1].strides[0] == WIN.k * WIN.k * WIN.c,
          "NHWC: channel stride 1 in all three, the filter KRSC");
}

static void test_align(void)
{
    _Alignas(64) char buf[128];
    const void *p16[3] = {buf, buf + 32, buf + 64};
    const void *p8[3] = {buf, buf + 8, buf + 64};
    const void *p2[3] = {buf + 2, buf + 16, buf + 64};
    const void *p1[3] = {buf, buf + 16, buf + 3};
    tt_ok(cg_align_of(p16, 3) == 16, "16-byte aligned pointers: 16");
    tt_ok(cg_align_of(p8, 3) == 8, "one pointer 8-byte aligned: 8 (the least of the three)");
    tt_ok(cg_align_of(p2, 3) == 2 && cg_align_of(p1, 3) == 1, "2 and 1");
    tt_ok(cg_align_of(p16, 0) == 16, "no pointer: 16");
}

static void test_notes(void)
{
    unsigned all = CG_NOTE_TENSOR_CORE | CG_NOTE_DOWN_CONVERT_INPUTS |
                   CG_NOTE_REDUCED_PRECISION_REDUCTION | CG_NOTE_FFT | CG_NOTE_NONDETERMINISTIC |
                   CG_NOTE_WINOGRAD;
    /* the rule, case by case: (dtype, tf32, deterministic) x note -> allowed */
    int bad = 0, total = 0;
    for (int t = CG_DTYPE_FLOAT; t <= CG_DTYPE_HALF; t++)
        for (int tf = 0; tf < 2; tf++)
            for (int det = 0; det < 2; det++)
                for (unsigned bit = 1; bit <= CG_NOTE_WINOGRAD; bit <<= 1) {
                    cg_spec s = {.dtype = (cg_dtype)t, .tf32 = tf, .deterministic = det};
                    bool want = true;
                    if (det && bit == CG_NOTE_NONDETERMINISTIC)
                        want = false;
                    if (t == CG_DTYPE_FLOAT && !tf &&
                        (bit == CG_NOTE_TENSOR_CORE || bit == CG_NOTE_DOWN_CONVERT_INPUTS))
                        want = false;
                    total++;
                    bad += cg_notes_allowed(&s, bit) != want;
                }
    tt_ok(bad == 0, "each note alone, every type, tf32 and deterministic setting (%d of %d wrong)",
          bad, total);
    cg_spec bf = {.dtype = CG_DTYPE_BF16, .tf32 = false, .deterministic = false};
    cg_spec fp = {.dtype = CG_DTYPE_FLOAT, .tf32 = false, .deterministic = true};
    cg_spec tf = {.dtype = CG_DTYPE_FLOAT, .tf32 = true, .deterministic = false};
    tt_ok(cg_notes_allowed(&bf, all) && cg_notes_allowed(&tf, all) &&
              cg_notes_allowed(&fp, 0),
          "bf16 and tf32 (nondeterministic) take any plan; a plan without notes always runs");
    tt_ok(!cg_notes_allowed(&fp, CG_NOTE_WINOGRAD | CG_NOTE_TENSOR_CORE) &&
              cg_notes_allowed(&fp, CG_NOTE_WINOGRAD | CG_NOTE_FFT),
          "float without tf32: a tensor-core note among others excludes the plan");
}

static void test_pick(void)
{
    cg_candidate c[] = {
        {.ok = false, .ws_bytes = 0, .time_ms = 0.01f},    /* failed to finalize */
        {.ok = true, .ws_bytes = 1 << 30, .time_ms = 0.02f}, /* over the limit */
        {.ok = true, .ws_bytes = 4096, .time_ms = 0.50f},
        {.ok = true, .ws_bytes = 0, .time_ms = 0.30f},
        {.ok = true, .ws_bytes = 0, .time_ms = 0.30f},
    };
    size_t lim = 1 << 20;
    tt_ok(cg_pick(c, 5, false, lim) == 3,
          "timed: the fastest within the limit, the first of a tie");
    tt_ok(cg_pick(c, 5, true, lim) == 2, "deterministic: the first that finalized, untimed");
    tt_ok(cg_pick(c, 5, false, (size_t)2 << 30) == 1, "a larger limit admits the big one");
    tt_ok(cg_pick(c, 1, false, lim) == -1 && cg_pick(c, 0, true, lim) == -1, "none: -1");
    cg_candidate nan[] = {{.ok = true, .time_ms = 0.0f / 0.0f}, {.ok = true, .time_ms = 9.0f}};
    tt_ok(cg_pick(nan, 2, false, lim) == 1, "an unmeasured (NaN) time loses");
}

static void test_key(void)
{
    cg_spec s = {.pass = CONV_PASS_BACKWARD_DATA, .win = WIN, .layout = CG_LAYOUT_NHWC,
                 .dtype = CG_DTYPE_BF16, .deterministic = true, .align = 16};
    algo_cache *c = algo_cache_create();
    algo_key k = cg_spec_key(&s);
    algo_choice ch = {.algo = 2, .ws_bytes = 77};
    tt_ok(c != NULL && algo_cache_put(c, &k, &ch) == 0, "put a graph key");
    const algo_choice *got = algo_cache_find(c, &k);
    tt_ok(got != NULL && got->algo == 2 && got->ws_bytes == 77, "the same spec finds it");
    algo_key legacy = algo_key_make(s.pass, &s.win, true, true);
    tt_ok(algo_cache_find(c, &legacy) == NULL, "the legacy API's key of the shape misses");
    int misses = 0, total = 0;
    for (int field = 0; field < 7; field++) {
        cg_spec e = s;
        switch (field) {
        case 0: e.layout = CG_LAYOUT_NCHW; break;
        case 1: e.dtype = CG_DTYPE_HALF; break;
        case 2: e.align = 8; break;
        case 3: e.pass = CONV_PASS_FORWARD; break;
        case 4: e.deterministic = false; break;
        case 5: e.win.stride = 1; break;
        case 6: e.dtype = CG_DTYPE_FLOAT; break; /* float without tf32: no tensor math */
        }
        algo_key o = cg_spec_key(&e);
        total++;
        misses += algo_cache_find(c, &o) == NULL;
    }
    tt_ok(misses == total, "a spec differing in layout, type, alignment, pass, determinism or "
          "shape misses (%d of %d)", misses, total);
    cg_spec f1 = {.win = WIN, .dtype = CG_DTYPE_FLOAT, .tf32 = false, .align = 16};
    cg_spec f2 = f1;
    f2.tf32 = true;
    algo_key k1 = cg_spec_key(&f1), k2 = cg_spec_key(&f2);
    tt_ok(k1.tf32 != k2.tf32, "float: tf32 on and off are two keys");
    algo_cache_free(c);
}

/* The backend's spec (cg_spec_make): the data type from the precision,
 * float32 NHWC (an fp32 tower with TT_CUDA_LAYOUT=nhwc) included, and what
 * follows from it: the note filter and the key. */
static void test_spec_make(void)
{
    _Alignas(64) char buf[256];
    const void *ptrs[3] = {buf, buf + 64, buf + 128}, *odd[3] = {buf, buf + 4, buf + 128};
    struct {
        prec_t prec;
        cg_dtype want;
    } types[] = {{PREC_FP32, CG_DTYPE_FLOAT}, {PREC_BF16, CG_DTYPE_BF16},
                 {PREC_FP16, CG_DTYPE_HALF}};
    int bad = 0;
    for (int i = 0; i < 3; i++)
        for (int l = CG_LAYOUT_NCHW; l <= CG_LAYOUT_NHWC; l++)
            for (int tf = 0; tf < 2; tf++) {
                cg_spec s = cg_spec_make(CONV_PASS_BACKWARD_FILTER, &WIN, (cg_layout)l,
                                         types[i].prec, tf, tf == 0, ptrs);
                bad += s.dtype != types[i].want || s.layout != (cg_layout)l || s.tf32 != tf ||
                       s.deterministic != (tf == 0) || s.align != 16 ||
                       s.pass != CONV_PASS_BACKWARD_FILTER || s.win.f != WIN.f ||
                       s.win.stride != WIN.stride;
            }
    tt_ok(bad == 0, "cg_spec_make: float for fp32 (NCHW and NHWC), bf16, half; layout, tf32, "
          "determinism, pass and window carried; 16-byte alignment (%d of 12 wrong)", bad);
    cg_spec f = cg_spec_make(CONV_PASS_FORWARD, &WIN, CG_LAYOUT_NHWC, PREC_FP32, false, false,
                             odd);
    cg_spec t = cg_spec_make(CONV_PASS_FORWARD, &WIN, CG_LAYOUT_NHWC, PREC_FP32, true, false,
                             odd);
    tt_ok(f.align == 4, "a float pointer 4 bytes off: alignment 4 (%d)", f.align);
    cg_tensor ts[3];
    cg_spec_tensors(&f, ts);
    tt_ok(ts[0].strides[1] == 1 && ts[1].strides[1] == 1 && ts[2].strides[1] == 1 &&
              ts[1].strides[0] == WIN.k * WIN.k * WIN.c &&
              ts[0].strides[0] == WIN.h * WIN.w * WIN.c,
          "float32 NHWC: channel innermost in x, w (KRSC) and y");
    tt_ok(!cg_notes_allowed(&f, CG_NOTE_TENSOR_CORE) &&
              !cg_notes_allowed(&f, CG_NOTE_DOWN_CONVERT_INPUTS) && cg_notes_allowed(&f, 0) &&
              cg_notes_allowed(&t, CG_NOTE_TENSOR_CORE | CG_NOTE_DOWN_CONVERT_INPUTS),
          "float32 NHWC without tf32: no tensor-core or down-converting plan; with tf32 both");
    cg_spec nchw = f, bf = f;
    nchw.layout = CG_LAYOUT_NCHW;
    bf.dtype = CG_DTYPE_BF16;
    algo_key kf = cg_spec_key(&f), kt = cg_spec_key(&t), kn = cg_spec_key(&nchw),
             kb = cg_spec_key(&bf);
    tt_ok(memcmp(&kf, &kt, sizeof(kf)) != 0 && memcmp(&kf, &kn, sizeof(kf)) != 0 &&
              memcmp(&kf, &kb, sizeof(kf)) != 0,
          "float32 NHWC's key differs from tf32's, from float32 NCHW's and from bf16 NHWC's");
}

static void test_choice(void)
{
    cg_spec s = {.layout = CG_LAYOUT_NCHW, .deterministic = true};
    tt_ok(!cg_worth_trying(&s), "deterministic NCHW: no graph (untimed, it may be far slower)");
    s.layout = CG_LAYOUT_NHWC;
    tt_ok(cg_worth_trying(&s) && cg_prefer_graph(&s, 9.0f, 1.0f),
          "deterministic NHWC: the graph's plan, untimed");
    s.deterministic = false;
    s.layout = CG_LAYOUT_NCHW;
    tt_ok(cg_worth_trying(&s), "timed NCHW: the graph is tried");
    tt_ok(cg_prefer_graph(&s, 1.0f, 2.0f) && cg_prefer_graph(&s, 2.0f, 2.0f) &&
              !cg_prefer_graph(&s, 2.5f, 2.0f),
          "timed: the graph's plan when at least as fast as the legacy algorithm");
}

int main(void)
{
    test_choice();
    test_tensors();
    test_align();
    test_notes();
    test_pick();
    test_key();
    test_spec_make();
    return tt_done();
}
