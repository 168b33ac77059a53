/* test_precision.c - the GPU-independent half of mixed precision on the
 * CUDA backend (src/backend/cuda/precision.c, device_towers.c's sizing), on the
 * CPU: which operations compute in the 16-bit type, what a GPU needs for
 * it, and where the 16-bit copies of a dense or conv2d call live - every
 * copy aligned, none overlapping another, each as large as its tensor - and
 * the scratch region a model's towers reserve at setup (its largest layer). */
#include <stdio.h>
#include <string.h>

#include "backend/mem_pool.h"
#include "backend/precision.h"
#include "train/device_towers.h"
#include "tt_test.h"

static char dir[256];

/* Regions [at, at + bytes) of one layout, checked together. */
typedef struct {
    size_t at, bytes;
} region;

/* every region aligned, inside the total, and apart from every other */
static bool regions_ok(const region *r, int n, size_t total)
{
    for (int i = 0; i < n; i++) {
        if (r[i].at % MEM_POOL_ALIGN != 0 || r[i].at + r[i].bytes > total)
            return false;
        for (int j = 0; j < i; j++)
            if (r[i].at < r[j].at + r[j].bytes && r[j].at < r[i].at + r[i].bytes)
                return false;
    }
    return true;
}

static size_t sum_bytes(const region *r, int n)
{
    size_t s = 0;
    for (int i = 0; i < n; i++)
        s += r[i].bytes;
    return s;
}

static void test_table(void)
{
    prec_t p = PREC_FP32;
    tt_ok(prec_parse("bf16", &p) == 0 && p == PREC_BF16 && prec_parse("fp16", &p) == 0 &&
              p == PREC_FP16 && prec_parse("fp32", &p) == 0 && p == PREC_FP32 &&
              prec_parse("fp8", &p) == -1 && prec_parse(NULL, &p) == -1,
          "parse: fp32, bf16, fp16; anything else refused");
    tt_ok(strcmp(prec_name(PREC_BF16), "bf16") == 0 && strcmp(prec_name(PREC_FP16), "fp16") == 0 &&
              strcmp(prec_name(PREC_FP32), "fp32") == 0,
          "names");
    int reduced[3] = {0, 0, 0};
    bool only_products = true;
    for (int q = 0; q < 3; q++)
        for (int op = 0; op < PREC_OP_COUNT; op++) {
            bool r = prec_reduced((prec_t)q, (prec_op)op);
            reduced[q] += r;
            if (r && op != PREC_OP_DENSE && op != PREC_OP_CONV)
                only_products = false;
        }
    tt_ok(reduced[PREC_FP32] == 0 && reduced[PREC_BF16] == 2 && reduced[PREC_FP16] == 2 &&
              only_products && prec_reduced(PREC_BF16, PREC_OP_DENSE) &&
              prec_reduced(PREC_FP16, PREC_OP_CONV),
          "bf16 and fp16: dense and conv2d in the 16-bit type; batchnorm, pooling, "
          "element-wise, loss, all-reduce, optimizer in fp32; fp32: nothing reduced");
    tt_ok(prec_elem_bytes(PREC_FP32) == 4 && prec_elem_bytes(PREC_BF16) == 2 &&
              prec_elem_bytes(PREC_FP16) == 2,
          "element sizes 4, 2, 2");
    char line[256];
    prec_describe(PREC_BF16, line, sizeof(line));
    tt_ok(strncmp(line, "dense, conv2d in bf16 (fp32 accumulation); batchnorm", 52) == 0 &&
              strstr(line, "optimizer in fp32") != NULL,
          "describe: %s", line);
    prec_describe(PREC_FP32, line, sizeof(line));
    tt_ok(strcmp(line, "everything in fp32") == 0, "describe fp32: %s", line);
}

static void test_devices(void)
{
    tt_err err = {0};
    tt_ok(prec_check_device(PREC_BF16, 3, "NVIDIA A100-SXM4-80GB", 8, 0, &err) == 0 &&
              prec_check_device(PREC_BF16, 0, "NVIDIA H100", 9, 0, &err) == 0 &&
              prec_check_device(PREC_FP16, 0, "Tesla V100", 7, 0, &err) == 0 &&
              prec_check_device(PREC_FP32, 0, "Tesla P100", 6, 0, &err) == 0 &&
              err.code == TT_OK,
          "bf16 on 8.0 and 9.0, fp16 on 7.0, fp32 anywhere: accepted");
    int rc = prec_check_device(PREC_BF16, 1, "Tesla T4", 7, 5, &err);
    tt_ok(rc == -1 && err.code == TT_ERR_USAGE && strchr(err.msg, '\n') == NULL &&
              strcmp(err.msg, "cuda:1 (Tesla T4): precision \"bf16\" needs compute capability "
                              "8.0 or above (bf16 tensor cores); this GPU has 7.5") == 0,
          "bf16 on 7.5: exit-2 error, one line naming the device (%s)", err.msg);
    err_clear(&err);
    rc = prec_check_device(PREC_FP16, 0, "Tesla P100", 6, 0, &err);
    tt_ok(rc == -1 && err.code == TT_ERR_USAGE && strstr(err.msg, "\"fp16\" needs compute "
                                                                  "capability 7.0") != NULL,
          "fp16 on 6.0: refused (%s)", err.msg);
}

static void test_layouts(void)
{
    int dense[][3] = {{64, 400, 120}, {1, 1, 1}, {7, 10, 3}, {300, 3072, 10}};
    bool all_ok = true;
    for (size_t s = 0; s < sizeof(dense) / sizeof(dense[0]); s++) {
        int n = dense[s][0], in = dense[s][1], out = dense[s][2];
        for (int q = PREC_BF16; q <= PREC_FP16; q++) {
            prec_dense_copies l;
            prec_dense_copies_of((prec_t)q, n, in, out, &l);
            region r[3] = {{l.x, (size_t)n * in * 2},
                           {l.w, (size_t)out * in * 2},
                           {l.dy, (size_t)n * out * 2}};
            /* w last: the region without it ends before it, x and dy within */
            if (!regions_ok(r, 3, l.bytes) || l.bytes > sum_bytes(r, 3) + 3 * MEM_POOL_ALIGN ||
                l.w < l.bytes_no_w || l.x + r[0].bytes > l.bytes_no_w ||
                l.dy + r[2].bytes > l.bytes_no_w) {
                tt_diag("dense %d x %d -> %d %s: x %zu w %zu dy %zu of %zu", n, in, out,
                        prec_name((prec_t)q), l.x, l.w, l.dy, l.bytes);
                all_ok = false;
            }
        }
    }
    tt_ok(all_ok, "dense: copies of x [n,in], w [out,in], dy [n,out] in 2-byte elements, "
                  "aligned to %d, apart, within the region, little padding",
          MEM_POOL_ALIGN);
    window_desc conv[] = {{64, 1, 28, 28, 6, 5, 1, 2, 28, 28, false, false},
                          {8, 16, 16, 16, 32, 3, 2, 1, 8, 8, false, false},
                          {3, 5, 9, 7, 4, 3, 1, 1, 9, 7, false, false}};
    all_ok = true;
    for (size_t s = 0; s < sizeof(conv) / sizeof(conv[0]); s++) {
        const window_desc *d = &conv[s];
        prec_conv_copies l;
        prec_conv_copies_of(PREC_BF16, d, false, &l);
        size_t wn = (size_t)d->f * d->c * d->k * d->k * 2;
        region r[4] = {{l.x, (size_t)d->n * d->c * d->h * d->w * 2},
                       {l.w, wn},
                       {l.y, (size_t)d->n * d->f * d->oh * d->ow * 2},
                       {l.dw, wn}};
        if (!regions_ok(r, 4, l.bytes) || l.bytes > sum_bytes(r, 4) + 4 * MEM_POOL_ALIGN ||
            l.w < l.bytes_no_w || l.x + r[0].bytes > l.bytes_no_w ||
            l.y + r[2].bytes > l.bytes_no_w || l.dw + r[3].bytes > l.bytes_no_w)
            all_ok = false;
    }
    tt_ok(all_ok, "conv2d: copies of x (and dx), w, y (and dy), dw: aligned, apart, within "
                  "the region; w last, the others within bytes_no_w");
    prec_dense_copies ld;
    prec_conv_copies lc;
    prec_dense_copies_of(PREC_FP32, 64, 400, 120, &ld);
    prec_conv_copies_of(PREC_FP32, &conv[0], false, &lc);
    tt_ok(ld.bytes == 0 && lc.bytes == 0, "fp32: no copies");
    /* blocked sides with bf16 gradients are read and written in place:
     * their places are empty; with float32 gradients they stay */
    window_desc bd = conv[1];
    bd.blocked_x = bd.blocked_y = true;
    prec_conv_copies lb, lf, l0;
    prec_conv_copies_of(PREC_BF16, &bd, true, &lb);
    prec_conv_copies_of(PREC_BF16, &bd, false, &lf);
    prec_conv_copies_of(PREC_BF16, &conv[1], true, &l0);
    size_t dwb = (size_t)bd.f * bd.c * bd.k * bd.k * 2;
    tt_ok(lb.bytes_no_w == lb.dw + dwb && lb.dw < (size_t)MEM_POOL_ALIGN &&
              lf.bytes_no_w == l0.bytes_no_w && lf.bytes_no_w > lb.bytes_no_w + 4096,
          "conv2d with blocked x and y and bf16 gradients: only dw's place (%zu bytes; %zu "
          "with float32 gradients, as NCHW sides)", lb.bytes_no_w, lf.bytes_no_w);
    /* float32 NHWC (an fp32 tower in the blocked layout): float32 places,
     * only for a call with a blocked side; a blocked side in place (its
     * gradients are float32 NHWC too), whatever g16 says */
    prec_conv_copies f1, f2, fy;
    prec_conv_copies_of(PREC_FP32, &bd, false, &f1);
    prec_conv_copies_of(PREC_FP32, &bd, true, &f2);
    window_desc stem = bd;
    stem.blocked_x = false;
    prec_conv_copies_of(PREC_FP32, &stem, false, &fy);
    size_t dwf = (size_t)bd.f * bd.c * bd.k * bd.k * 4;
    size_t xf = (size_t)bd.n * bd.c * bd.h * bd.w * 4;
    region rf[3] = {{fy.x, xf}, {fy.dw, dwf}, {fy.w, dwf}};
    tt_ok(f1.bytes_no_w == f1.dw + dwf && f1.dw < (size_t)MEM_POOL_ALIGN &&
              f1.w >= f1.bytes_no_w && f1.bytes == f1.w + dwf &&
              memcmp(&f1, &f2, sizeof(f1)) == 0,
          "fp32 conv2d with blocked x and y: dw's and w's float32 (KRSC) places only (%zu and "
          "%zu bytes), with or without g16", f1.bytes_no_w, f1.bytes);
    tt_ok(regions_ok(rf, 3, fy.bytes) && fy.bytes_no_w == fy.dw + dwf && fy.x + xf <= fy.dw &&
              fy.y == fy.dw, /* y's place empty: dw starts at it */
          "fp32 conv2d from an NCHW x into the layout: x's float32 place too, none for y "
          "(%zu bytes without w)", fy.bytes_no_w);
    prec_dense_copies_of(PREC_BF16, 0, 400, 120, &ld);
    tt_ok(ld.bytes == 0, "an empty batch: no copies");
}

static int build(const char *name, const char *text, shape3 data, model_cfg *mc, model_t *m)
{
    char path[320];
    snprintf(path, sizeof(path), "%s/%s.cfg", dir, name);
    tt_write_file(NULL, path, text);
    tt_err err = {0};
    if (model_cfg_load(path, mc, &err) != 0 || model_build(mc, data, m, &err) != 0) {
        tt_diag("%s: %s", path, err.msg);
        return -1;
    }
    return 0;
}

static void test_model_sizing(void)
{
    static const char *lenet =
        "input = [1, 28, 28]; classes = 10; layers = (\n"
        " { name = \"conv0\"; type = \"conv2d\"; filters = 6; kernel = 5; padding = 2; "
        "activation = \"relu\"; },\n"
        " { name = \"pool0\"; type = \"maxpool\"; kernel = 2; },\n"
        " { name = \"conv1\"; type = \"conv2d\"; filters = 16; kernel = 5; activation = \"relu\"; },\n"
        " { name = \"pool1\"; type = \"maxpool\"; kernel = 2; },\n"
        " { name = \"fc0\"; type = \"dense\"; units = 120; activation = \"relu\"; },\n"
        " { name = \"fc1\"; type = \"dense\"; units = 84; activation = \"relu\"; },\n"
        " { name = \"fc2\"; type = \"dense\"; units = 10; } );\n";
    static const char *mlp =
        "input = [3, 32, 32]; classes = 10; layers = (\n"
        " { name = \"conv0\"; type = \"conv2d\"; filters = 4; kernel = 1; stride = 2; },\n"
        " { name = \"fc0\"; type = \"dense\"; units = 4000; activation = \"relu\"; },\n"
        " { name = \"fc1\"; type = \"dense\"; units = 10; } );\n";
    model_cfg mc1, mc2;
    model_t m1, m2;
    memset(&mc1, 0, sizeof(mc1));
    memset(&mc2, 0, sizeof(mc2));
    if (build("lenet", lenet, shape3_make(1, 28, 28), &mc1, &m1) != 0 ||
        build("mlp", mlp, shape3_make(3, 32, 32), &mc2, &m2) != 0) {
        tt_ok(0, "the test models build");
        return;
    }
    /* LeNet at batch 64 in bf16: conv0 is the largest call. A tower's
     * weights have copies of their own (weight_copies.h): no w place.
     *   x  64*1*28*28 = 50176 elements = 100352 bytes at 0
     *   y  64*6*28*28 = 301056 elements = 602112 bytes at 100352
     *   dw 6*1*5*5 = 150 elements = 300 bytes at 702464: 702764 bytes.
     * (fc0: 51200 + 15360 bytes.) */
    size_t b = device_copies_bytes(&m1, NULL, false, PRECISION_BF16, 64);
    tt_ok(b == 702764, "LeNet, batch 64, bf16: the scratch region fits conv0's copies, the "
                       "largest, without w's place (%zu bytes, expected 702764)", b);
    tt_ok(device_copies_bytes(&m1, NULL, false, PRECISION_FP16, 64) == b &&
              device_copies_bytes(&m1, NULL, false, PRECISION_FP32, 64) == 0,
          "the same for fp16; none for fp32");
    /* a model whose dense layer is the largest: fc0, 4*16*16 = 1024 -> 4000
     * at batch 32:
     *   x 32*1024*2 = 65536 at 0, dy 32*4000*2 = 256000 at 65536: 321536
     *   bytes (its w, 8 MB, has its own copy; the conv: x 196608 + y 65536
     *   + dw 24 = 262168 bytes) */
    /* a tower whose conv0 output is blocked, with bf16 gradients: conv0
     * keeps x's place (the model input is NCHW) and dw's, not y's:
     * 100352 + 300 bytes at 100352 (x's end, aligned) = 100652 */
    bool all_blocked[16];
    for (int i = 0; i < 16; i++)
        all_blocked[i] = true;
    size_t bb = device_copies_bytes(&m1, all_blocked, true, PRECISION_BF16, 64);
    tt_ok(bb == 100652 && device_copies_bytes(&m1, all_blocked, false, PRECISION_BF16, 64) == b,
          "LeNet, blocked outputs and bf16 gradients: conv0 keeps only x's and dw's places "
          "(%zu bytes, expected 100652; float32 gradients: %zu as NCHW)", bb, b);
    /* fp32 in NHWC (TT_CUDA_LAYOUT=nhwc): conv0 reads the NCHW model input
     * through x's float32 place, 64*1*28*28*4 = 200704 bytes at 0, writes
     * its blocked y in place, and cuDNN's KRSC dw takes 6*1*5*5*4 = 600
     * bytes at 200704 (aligned already): 201304; conv1 (both sides
     * blocked) only dw, 16*6*5*5*4 = 9600. g16 changes nothing. */
    size_t fb = device_copies_bytes(&m1, all_blocked, false, PRECISION_FP32, 64);
    size_t fb16 = device_copies_bytes(&m1, all_blocked, true, PRECISION_FP32, 64);
    tt_ok(fb == 201304 && fb16 == fb,
          "LeNet, fp32 in NHWC: conv0's float32 x and dw places (%zu bytes, expected 201304)",
          fb);
    b = device_copies_bytes(&m2, NULL, false, PRECISION_BF16, 32);
    tt_ok(b == 321536, "a dense layer larger than the convolution sets the size (%zu bytes, "
                        "expected 321536)", b);
    model_free(&m1);
    model_free(&m2);
    model_cfg_free(&mc1);
    model_cfg_free(&mc2);
}

int main(void)
{
    tt_tmpdir_make(dir, sizeof(dir), "precision");
    test_table();
    test_devices();
    test_layouts();
    test_model_sizing();
    tt_tmpdir_remove(dir);
    return tt_done();
}
