/* conv_rules.c - the measurements behind conv_dnnl.c's two shape rules:
 *   dual      oneDNN's forward convolution against the backward-data pass
 *             of its dual (the transposed convolution with the weights
 *             flipped), which computes the same y (cpu_conv_dnnl_dual_forward);
 *   winograd  its direct convolutions against its Winograd ones, forward,
 *             backward-data and backward-weights (cpu_conv_dnnl_winograd;
 *             oneDNN has them at AVX-512 only).
 *
 * For each shape (batch 32, C -> F channels, H x H, 3x3, stride 1, padding
 * 1, float32, as one conv_dnnl group of a batch of 128), one thread, the
 * primitives built as conv_dnnl.c builds them (the layout fixed: NHWC, as
 * the CPU backend keeps activations below AVX-512, or nChw16c at AVX-512),
 * run alternately, the median of --rounds each after 3 warm-ups. Prints ms
 * and GFLOP/s of each and their ratio (above 1: the rule's choice is
 * faster). The first line is the ISA oneDNN runs at (cap it with
 * ONEDNN_MAX_CPU_ISA=AVX2; bench/conv_rules/run does both).
 *
 * Build: cc -O2 -o conv_rules conv_rules.c -ldnnl
 * Run:   OMP_NUM_THREADS=1 ./conv_rules dual|winograd [rounds] [nhwc|blocked16]
 */
#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ROUNDS 1000

static dnnl_engine_t engine;
static dnnl_stream_t stream;

static void check(dnnl_status_t st, const char *what)
{
    if (st != dnnl_success) {
        fprintf(stderr, "conv_rules: %s failed (oneDNN status %d)\n", what, (int)st);
        exit(1);
    }
}

static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "SSE41";
    case dnnl_cpu_isa_avx: return "AVX";
    case dnnl_cpu_isa_avx2: return "AVX2";
    case dnnl_cpu_isa_avx512_core: return "AVX512_CORE";
    case dnnl_cpu_isa_avx512_core_vnni: return "AVX512_CORE_VNNI";
    case dnnl_cpu_isa_avx512_core_bf16: return "AVX512_CORE_BF16";
    case dnnl_cpu_isa_avx512_core_amx: return "AVX512_CORE_AMX";
    default: return "another level";
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One primitive with its three tensors (random values) and scratchpad. */
typedef struct {
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[4];
    int n_args;
} job;

static dnnl_memory_t random_memory(const dnnl_memory_desc_t *md)
{
    size_t bytes = dnnl_memory_desc_get_size(md);
    float *data = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (data == NULL) {
        fprintf(stderr, "conv_rules: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        data[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
    dnnl_memory_t m;
    check(dnnl_memory_create(&m, md, engine, data), "memory_create");
    return m;
}

/* The passes a job runs. DUAL: the backward-data of F -> C on H x H,
 * whose diff_src (F channels) is the forward's y. */
enum { FWD, BWD_DATA, BWD_WEIGHTS, DUAL };

/* Pass `pass` of the C -> F convolution on H x H with algorithm alg. */
static job job_make(int n, int c, int f, int h, dnnl_format_tag_t tag, int pass,
                    dnnl_alg_kind_t alg)
{
    int in = pass == DUAL ? f : c, out = pass == DUAL ? c : f;
    dnnl_dims_t src_dims = {n, in, h, h}, wei_dims = {out, in, 3, 3}, dst_dims = {n, out, h, h};
    dnnl_dims_t strides = {1, 1}, pad = {1, 1};
    dnnl_memory_desc_t src, wei, dst;
    dnnl_memory_desc_init_by_tag(&src, 4, src_dims, dnnl_f32, tag);
    dnnl_memory_desc_init_by_tag(&wei, 4, wei_dims, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dst, 4, dst_dims, dnnl_f32, tag);
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "attr_create");
    check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad");
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_desc_t fpd, pd;
    check(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, &src, &wei, NULL,
                                             &dst, strides, pad, pad),
          "forward_desc_init");
    check(dnnl_primitive_desc_create(&fpd, &fd, attr, engine, NULL), "forward pd");
    pd = fpd;
    if (pass == BWD_DATA || pass == DUAL) {
        check(dnnl_convolution_backward_data_desc_init(&bd, alg, &src, &wei, &dst, strides, pad,
                                                       pad),
              "backward_data_desc_init");
        check(dnnl_primitive_desc_create(&pd, &bd, attr, engine, fpd), "backward-data pd");
    } else if (pass == BWD_WEIGHTS) {
        check(dnnl_convolution_backward_weights_desc_init(&bd, alg, &src, &wei, NULL, &dst,
                                                          strides, pad, pad),
              "backward_weights_desc_init");
        check(dnnl_primitive_desc_create(&pd, &bd, attr, engine, fpd), "backward-weights pd");
    }
    bool bd_ = pass == BWD_DATA || pass == DUAL, bw = pass == BWD_WEIGHTS;
    job j = {0};
    check(dnnl_primitive_create(&j.prim, pd), "primitive_create");
    const dnnl_query_t q[3] = {bd_ ? dnnl_query_diff_src_md : dnnl_query_src_md,
                               bw ? dnnl_query_diff_weights_md : dnnl_query_weights_md,
                               pass == FWD ? dnnl_query_dst_md : dnnl_query_diff_dst_md};
    const int arg[3] = {bd_ ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC,
                        bw ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS,
                        pass == FWD ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST};
    for (int i = 0; i < 3; i++) {
        j.args[i].arg = arg[i];
        j.args[i].memory = random_memory(dnnl_primitive_desc_query_md(pd, q[i], 0));
    }
    j.n_args = 3;
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp != NULL && dnnl_memory_desc_get_size(sp) > 0) {
        j.args[3].arg = DNNL_ARG_SCRATCHPAD;
        j.args[3].memory = random_memory(sp);
        j.n_args = 4;
    }
    if (pd != fpd)
        dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_attr_destroy(attr);
    return j;
}

static double job_time(const job *j)
{
    double t = now_s();
    check(dnnl_primitive_execute(j->prim, stream, j->n_args, j->args), "execute");
    check(dnnl_stream_wait(stream), "stream_wait");
    return now_s() - t;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

/* One row: job a against job b, alternately; a / b is the ratio. */
static void row(const char *label, int c, int f, int h, int rounds, job a, job b)
{
    static double ta[MAX_ROUNDS], tb[MAX_ROUNDS];
    for (int r = 0; r < rounds + 3; r++) {
        double x = job_time(&a), y = job_time(&b);
        if (r >= 3) {
            ta[r - 3] = x;
            tb[r - 3] = y;
        }
    }
    double ma = median(ta, rounds), mb = median(tb, rounds);
    double flop = 2.0 * 32 * c * f * 9 * h * h;
    printf("%4d %4d %4d %-6s %10.3f %8.1f %10.3f %8.1f %8.2f\n", c, f, h, label, ma * 1e3,
           flop / ma * 1e-9, mb * 1e3, flop / mb * 1e-9, ma / mb);
}

int main(int argc, char **argv)
{
    bool wino = argc > 1 && strcmp(argv[1], "winograd") == 0;
    int rounds = argc > 2 ? atoi(argv[2]) : 15;
    bool blocked = argc > 3 && strcmp(argv[3], "blocked16") == 0;
    if (argc < 2 || (!wino && strcmp(argv[1], "dual")) || rounds < 1 || rounds > MAX_ROUNDS ||
        (argc > 3 && !blocked && strcmp(argv[3], "nhwc"))) {
        fprintf(stderr, "usage: conv_rules dual|winograd [rounds 1-%d] [nhwc|blocked16]\n",
                MAX_ROUNDS);
        return 2;
    }
    check(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine_create");
    check(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "stream_create");
    dnnl_format_tag_t tag = blocked ? dnnl_aBcd16b : dnnl_acdb;
    const int chans[3] = {16, 32, 64}, sizes[3] = {32, 16, 8}, n = 32;
    printf("oneDNN at %s, %s, batch %d, 3x3, stride 1, padding 1, one thread, median of %d\n",
           isa_name(dnnl_get_effective_cpu_isa()), blocked ? "nChw16c" : "NHWC", n, rounds);
    printf("%4s %4s %4s %-6s %10s %8s %10s %8s %8s\n", "C", "F", "H", "pass",
           wino ? "direct ms" : "fwd ms", "GFLOP/s", wino ? "wino ms" : "dual ms", "GFLOP/s",
           "ratio");
    const dnnl_alg_kind_t direct = dnnl_convolution_direct, winograd = dnnl_convolution_winograd;
    for (int ci = 0; ci < 3; ci++)
        for (int fi = 0; fi < 3; fi++)
            for (int hi = 0; hi < 3; hi++) {
                int c = chans[ci], f = chans[fi], h = sizes[hi];
                if (c * f * h * h > 64 * 64 * 16 * 16)
                    continue; /* ResNet-20's sizes: channels double as H halves */
                if (!wino) {
                    row("fwd", c, f, h, rounds, job_make(n, c, f, h, tag, FWD, direct),
                        job_make(n, c, f, h, tag, DUAL, direct));
                    continue;
                }
                const char *label[3] = {"fwd", "bwd_d", "bwd_w"};
                for (int pass = FWD; pass <= BWD_WEIGHTS; pass++)
                    row(label[pass], c, f, h, rounds, job_make(n, c, f, h, tag, pass, direct),
                        job_make(n, c, f, h, tag, pass, winograd));
            }
    return 0;
}
