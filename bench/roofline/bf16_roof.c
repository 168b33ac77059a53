/* bf16_roof.c - the machine's bf16 roof: the best large square gemm oneDNN
 * reaches with every core (its own OpenMP threads) as a matmul primitive,
 * bf16 A and B, float32 C (what towertrain's bf16 layers compute: bf16
 * products, float32 sums), B in the layout the primitive asks for
 * (reordered once, untimed); on AMX where the CPU has it, else AVX512_BF16.
 *
 *   cc -O2 bf16_roof.c -ldnnl -o bf16_roof
 * usage: bf16_roof N CALLS
 * prints "oneDNN-bf16 <N> <best GFLOP/s> <median GFLOP/s> <oneDNN's implementation>"
 * (one untimed call first: thread start-up and JIT). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dnnl.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        if ((call) != dnnl_success) {                                                 \
            fprintf(stderr, "bf16_roof: %s failed\n", #call);                         \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static void *buffer(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (p == NULL) {
        fprintf(stderr, "bf16_roof: out of memory\n");
        exit(1);
    }
    memset(p, 0, bytes);
    return p;
}

/* count bf16 values (i % m) / 8, exact in bf16: the top half of the float */
static void *bf16_values(size_t count, int m)
{
    unsigned short *p = buffer(count * 2);
    for (size_t i = 0; i < count; i++) {
        float f = (float)(i % (size_t)m) * 0.125f;
        unsigned int u;
        memcpy(&u, &f, 4);
        p[i] = (unsigned short)(u >> 16);
    }
    return p;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4096, calls = argc > 2 ? atoi(argv[2]) : 5;
    if (argc != 3 || n < 1 || calls < 1 || calls > 1000) {
        fprintf(stderr, "usage: bf16_roof N CALLS\n");
        return 2;
    }
    double gf[1000];
    const char *impl = "?";
    size_t nn = (size_t)n * n;
    dnnl_engine_t eng;
    dnnl_stream_t st;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_dims_t dims = {n, n};
    dnnl_memory_desc_t a_md, b_any, b_plain, c_md;
    CHECK(dnnl_memory_desc_init_by_tag(&a_md, 2, dims, dnnl_bf16, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&b_any, 2, dims, dnnl_bf16, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_init_by_tag(&b_plain, 2, dims, dnnl_bf16, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&c_md, 2, dims, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    CHECK(dnnl_matmul_desc_init(&md, &a_md, &b_any, NULL, &c_md));
    CHECK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
    CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    const dnnl_memory_desc_t *b_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_t mm;
    CHECK(dnnl_primitive_create(&mm, pd));
    dnnl_memory_t a, b0, b, c;
    CHECK(dnnl_memory_create(&a, &a_md, eng, bf16_values(nn, 7)));
    CHECK(dnnl_memory_create(&b0, &b_plain, eng, bf16_values(nn, 5)));
    CHECK(dnnl_memory_create(&b, b_md, eng, buffer(dnnl_memory_desc_get_size(b_md))));
    CHECK(dnnl_memory_create(&c, &c_md, eng, buffer(nn * 4)));
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t r;
    CHECK(dnnl_reorder_primitive_desc_create(&rpd, &b_plain, eng, b_md, eng, NULL));
    CHECK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, b0}, {DNNL_ARG_TO, b}};
    CHECK(dnnl_primitive_execute(r, st, 2, rargs));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    CHECK(dnnl_primitive_execute(mm, st, 3, args));
    CHECK(dnnl_stream_wait(st));
    for (int k = 0; k < calls; k++) {
        double t = now();
        CHECK(dnnl_primitive_execute(mm, st, 3, args));
        CHECK(dnnl_stream_wait(st));
        gf[k] = 2.0 * n * n * (double)n / (now() - t) / 1e9;
    }
    qsort(gf, (size_t)calls, sizeof(double), cmp);
    printf("oneDNN-bf16 %d %.1f %.1f %s\n", n, gf[calls - 1], gf[calls / 2], impl);
    return 0;
}
