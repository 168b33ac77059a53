/* conv_wino.c - 3x3, stride-1, padding-1 convolutions by Winograd's minimal
 * filtering F(4x4, 3x3) (Lavin and Gray, 2016), AVX2 + FMA, NHWC.
 *
 * Why: below AVX-512 oneDNN has no Winograd kernels, and its direct ones
 * run ResNet-20's convolutions at 70-90% of the core's multiply-add rate,
 * so no direct convolution can go much faster; F(4x4, 3x3) computes each
 * 4x4 block of outputs with 36 products per channel pair instead of 144.
 * One thread, 32 images in groups of 8, against the F(2x2, 3x3) this file
 * had before (same product kernel; a Zen 5 capped at AVX2): forward 1.47x
 * at 16 channels 32x32, 1.62x at 32 channels 16x16, 1.68x at 64 channels
 * 8x8; weight gradient 1.55x, 1.64x, 1.66x. Training ResNet-20
 * (TT_CPU_ISA=avx2, 5 interleaved rounds): 1.18x, all of it in the 32- and
 * 64-channel stages (1.3-1.7x a layer); the 16-channel stage's layers,
 * whose tensors (8 MB a tower) come from memory, stayed at 1.0-1.1x.
 *
 * The group's images' outputs are cut into 4x4 tiles (the last row and
 * column of tiles of an image hang over its edge when a side is no
 * multiple of 4; their outside outputs are not stored), numbered image by
 * image, and taken WINO_TILES at a time across images (an 8x8 image has
 * only 4 tiles) so that a block's transforms stay in L2:
 *   V[xi][t][c] = (B^T d B)[xi]   d: tile t's 6x6 inputs of channel c (zeros
 *                                 outside the image: the padding)
 *   M[xi][t][f] = sum over c of V[xi][t][c] U[xi][c][f]   36 products
 *   y           = A^T M A         the tile's 4x4 outputs of channel f
 * with U = G g G^T per filter (cpu_conv_wino_weights), the interpolation
 * points 0, 1, -1, 2, -2 and infinity:
 *   B^T = [4  0 -5  0 1 0;      G = [ 1/4     0     0;
 *          0 -4 -4  1 1 0;            -1/6  -1/6  -1/6;
 *          0  4 -4 -1 1 0;            -1/6   1/6  -1/6;
 *          0 -2 -1  2 1 0;            1/24  1/12   1/6;
 *          0  2 -1 -2 1 0;            1/24 -1/12   1/6;
 *          0  4  0 -5 0 1]            0     0     1]
 *   A^T = [1 1  1 1  1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
 * Exact algebra. In float32 a result mixes its tile's sums, so its
 * rounding error follows the tile's largest one; test_cpu_isa_kernels
 * bounds it by a direct sum's bound at that magnitude and prints the share
 * (at most 1.05, mostly under 0.4). oneDNN's Winograd kernels, which
 * towertrain runs at AVX-512, use the same tile size. Each tile on its
 * own, and a group's tiles in a fixed order: the same bits on any number
 * of threads.
 *
 * Backward-data is the forward of the transposed convolution (dy in, dx
 * out, the filters transposed and flipped: cpu_conv_flip_weights).
 * Backward-weights differentiates the forward's algebra: with
 * dM = A dY A^T per tile (dY its 4x4 gradients, zeros past an edge),
 *   dU[xi][c][f] = sum over the group's tiles, in order, of
 *                  V[xi][t][c] dM[xi][t][f]
 *   dw           = G^T dU G   per filter. */
#include "backend/cpu/conv_wino.h"

#include <stdint.h>
#include <string.h>

#include "backend/cpu/simd_target.h"

#ifdef X86_KERNELS
#include <immintrin.h>
#endif

#define WINO_TILES 12 /* tiles a block: V and M of a block stay in L2 */
#define WINO_ROWS 6   /* tiles a product kernel: 6 x 16 sums in 12 registers */
#define XI 36         /* the 6x6 transformed points */

/* G's fractions, multiplied by: no division in the transforms */
#define S6 (1.0f / 6)
#define S12 (1.0f / 12)
#define S24 (1.0f / 24)

bool cpu_conv_wino_fits(const window_desc *d, bool relu, bool bias, bool bf16, bool nhwc,
                        cpu_isa_t isa)
{
#ifdef X86_KERNELS
    return isa == CPU_ISA_AVX2 && !relu && !bias && !bf16 && nhwc && d->blocked_x &&
           d->blocked_y && d->c % 16 == 0 && d->f % 16 == 0 && window_same_3x3(d);
#else
    (void)d, (void)relu, (void)bias, (void)bf16, (void)nhwc, (void)isa;
    return false;
#endif
}

size_t cpu_conv_wino_weight_floats(int cin, int cout)
{
    return XI * (size_t)cin * cout;
}

/* A scratch: a block's V and M (or dM), a row of zeros (the padding's
 * pixel), and the weight gradient's dU; the forward keeps the block
 * before's M in dU's place (36 x 12 x cout floats, within dU's
 * 36 x cin x cout: cin >= 16). */
static size_t scratch_zero(int cin, int cout)
{
    return XI * (size_t)WINO_TILES * (size_t)(cin + cout);
}

static float *scratch_du(float *scratch, int cin, int cout)
{
    return scratch + scratch_zero(cin, cout) + (size_t)(cin > cout ? cin : cout);
}

size_t cpu_conv_wino_scratch_floats(int cin, int cout)
{
    return scratch_zero(cin, cout) + (size_t)(cin > cout ? cin : cout) +
           XI * (size_t)cin * cout;
}

void cpu_conv_flip_weights(const float *w, int f, int c, int k, float *wf)
{
    size_t kk = (size_t)k * k;
    for (int i = 0; i < c; i++)
        for (int o = 0; o < f; o++)
            for (size_t t = 0; t < kk; t++)
                wf[((size_t)i * f + o) * kk + t] = w[((size_t)o * c + i) * kk + (kk - 1 - t)];
}

#ifdef X86_KERNELS
/* The transforms on eight channels at a time, one 1-D pass each (a 2-D
 * transform is one on the columns, then one on the rows). Inlined where
 * called, so the vectors stay in registers. */
#define INLINE_AVX2 TARGET_AVX2 static inline __attribute__((always_inline))

/* o = B^T d (d: six inputs along a column or row) */
INLINE_AVX2 void b_transform(const __m256 d[6], __m256 o[6])
{
    __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f);
    __m256 sum12 = _mm256_add_ps(d[1], d[2]), dif12 = _mm256_sub_ps(d[1], d[2]);
    __m256 dif31 = _mm256_sub_ps(d[3], d[1]), dif42 = _mm256_sub_ps(d[4], d[2]);
    o[0] = _mm256_fnmadd_ps(five, d[2], _mm256_fmadd_ps(four, d[0], d[4]));
    o[1] = _mm256_fnmadd_ps(four, sum12, _mm256_add_ps(d[4], d[3]));
    o[2] = _mm256_fmadd_ps(four, dif12, _mm256_sub_ps(d[4], d[3]));
    o[3] = _mm256_fmadd_ps(two, dif31, dif42);
    o[4] = _mm256_fnmadd_ps(two, dif31, dif42);
    o[5] = _mm256_fnmadd_ps(five, d[3], _mm256_fmadd_ps(four, d[1], d[5]));
}

/* o = A^T m (m: six products' sums; o: four outputs) */
INLINE_AVX2 void a_transform(const __m256 m[6], __m256 o[4])
{
    __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), eight = _mm256_set1_ps(8.0f);
    __m256 sum12 = _mm256_add_ps(m[1], m[2]), dif12 = _mm256_sub_ps(m[1], m[2]);
    __m256 sum34 = _mm256_add_ps(m[3], m[4]), dif34 = _mm256_sub_ps(m[3], m[4]);
    o[0] = _mm256_add_ps(_mm256_add_ps(m[0], sum12), sum34);
    o[1] = _mm256_fmadd_ps(two, dif34, dif12);
    o[2] = _mm256_fmadd_ps(four, sum34, sum12);
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(eight, dif34, dif12), m[5]);
}

/* o = A y (y: four output gradients; o: six) */
INLINE_AVX2 void a_gradient(const __m256 y[4], __m256 o[6])
{
    __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f);
    __m256 even = _mm256_add_ps(y[0], y[2]), odd = _mm256_add_ps(y[1], y[3]);
    __m256 even4 = _mm256_fmadd_ps(four, y[2], y[0]), odd4 = _mm256_fmadd_ps(four, y[3], y[1]);
    o[0] = y[0];
    o[1] = _mm256_add_ps(even, odd);
    o[2] = _mm256_sub_ps(even, odd);
    o[3] = _mm256_fmadd_ps(two, odd4, even4);
    o[4] = _mm256_fnmadd_ps(two, odd4, even4);
    o[5] = y[3];
}

/* o = G^T u (u: six sums; o: three filter taps) */
INLINE_AVX2 void g_gradient(const __m256 u[6], __m256 o[3])
{
    __m256 s6 = _mm256_set1_ps(S6), s12 = _mm256_set1_ps(S12), s24 = _mm256_set1_ps(S24);
    __m256 sum12 = _mm256_add_ps(u[1], u[2]), sum34 = _mm256_add_ps(u[3], u[4]);
    o[0] = _mm256_fmadd_ps(s24, sum34,
                           _mm256_fnmadd_ps(s6, sum12, _mm256_mul_ps(_mm256_set1_ps(0.25f), u[0])));
    o[1] = _mm256_fmadd_ps(s12, _mm256_sub_ps(u[3], u[4]),
                           _mm256_mul_ps(s6, _mm256_sub_ps(u[2], u[1])));
    o[2] = _mm256_fmadd_ps(s6, _mm256_sub_ps(sum34, sum12), u[5]);
}

/* o = G g (g: three filter taps; o: six) */
INLINE_AVX2 void g_transform(const __m256 g[3], __m256 o[6])
{
    __m256 s6 = _mm256_set1_ps(S6), s12 = _mm256_set1_ps(S12), s24 = _mm256_set1_ps(S24);
    __m256 sum02 = _mm256_add_ps(g[0], g[2]);
    __m256 ends = _mm256_fmadd_ps(s6, g[2], _mm256_mul_ps(s24, g[0])); /* g0 / 24 + g2 / 6 */
    o[0] = _mm256_mul_ps(_mm256_set1_ps(0.25f), g[0]);
    o[1] = _mm256_mul_ps(_mm256_set1_ps(-S6), _mm256_add_ps(sum02, g[1]));
    o[2] = _mm256_mul_ps(_mm256_set1_ps(-S6), _mm256_sub_ps(sum02, g[1]));
    o[3] = _mm256_fmadd_ps(s12, g[1], ends);
    o[4] = _mm256_fnmadd_ps(s12, g[1], ends);
    o[5] = g[2];
}

/* Tile t of a group of images of h x w: its image, and its top-left output */
static const float *tile_at(const float *base, int h, int w, int ch, int t, int *oy, int *ox)
{
    int tw = (w + 3) / 4, per = (h + 3) / 4 * tw;
    *oy = 4 * (t % per / tw);
    *ox = 4 * (t % tw);
    return base + (size_t)(t / per) * h * w * ch;
}

/* V[xi][k][c] of the block's tiles t0 + k, k < n; rows n..rows zero, so
 * that the product kernel runs whole groups of WINO_ROWS. Each of a tile's
 * 36 pixels is read through a pointer, to the row of zeros where it is
 * padding. */
TARGET_AVX2 static void input_transform(int h, int w, int cin, const float *x, int t0, int n,
                                        int rows, const float *zero, float *v)
{
    size_t plane = (size_t)WINO_TILES * cin;
    for (int k = 0; k < rows; k++) {
        if (k >= n) {
            for (int xi = 0; xi < XI; xi++)
                memset(v + xi * plane + (size_t)k * cin, 0, (size_t)cin * sizeof(float));
            continue;
        }
        int oy, ox;
        const float *img = tile_at(x, h, w, cin, t0 + k, &oy, &ox);
        const float *pixel[6][6];
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++) {
                int iy = oy - 1 + i, ix = ox - 1 + j;
                pixel[i][j] = iy >= 0 && iy < h && ix >= 0 && ix < w
                                  ? img + ((size_t)iy * w + ix) * cin
                                  : zero;
            }
        float *out = v + (size_t)k * cin;
        for (int c = 0; c < cin; c += 8) {
            __m256 t[6][6]; /* t[j] = B^T times column j; then each row of t B */
            for (int j = 0; j < 6; j++) {
                __m256 d[6];
                for (int i = 0; i < 6; i++)
                    d[i] = _mm256_loadu_ps(pixel[i][j] + c);
                b_transform(d, t[j]);
            }
            for (int i = 0; i < 6; i++) {
                __m256 row[6] = {t[0][i], t[1][i], t[2][i], t[3][i], t[4][i], t[5][i]}, o[6];
                b_transform(row, o);
                for (int j = 0; j < 6; j++)
                    _mm256_storeu_ps(out + c + (size_t)(i * 6 + j) * plane, o[j]);
            }
        }
    }
}

/* M[k][f..f+16] for tiles k0..k0+5 of one xi: v [tile][cin], u [cin][cout],
 * m [tile][cout]. The sum over c in order, in 12 named registers (with an
 * array of accumulators GCC keeps them on the stack and stores each one
 * every step: half the speed, measured). */
TARGET_AVX2 static void products_6x16(int cin, int cout, const float *v, const float *u,
                                      float *m)
{
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    for (int c = 0; c < cin; c++) {
        const float *uc = u + (size_t)c * cout;
        __m256 u0 = _mm256_loadu_ps(uc), u1 = _mm256_loadu_ps(uc + 8);
        __m256 b = _mm256_broadcast_ss(v + c);
        a00 = _mm256_fmadd_ps(b, u0, a00);
        a01 = _mm256_fmadd_ps(b, u1, a01);
        b = _mm256_broadcast_ss(v + (size_t)cin + c);
        a10 = _mm256_fmadd_ps(b, u0, a10);
        a11 = _mm256_fmadd_ps(b, u1, a11);
        b = _mm256_broadcast_ss(v + 2 * (size_t)cin + c);
        a20 = _mm256_fmadd_ps(b, u0, a20);
        a21 = _mm256_fmadd_ps(b, u1, a21);
        b = _mm256_broadcast_ss(v + 3 * (size_t)cin + c);
        a30 = _mm256_fmadd_ps(b, u0, a30);
        a31 = _mm256_fmadd_ps(b, u1, a31);
        b = _mm256_broadcast_ss(v + 4 * (size_t)cin + c);
        a40 = _mm256_fmadd_ps(b, u0, a40);
        a41 = _mm256_fmadd_ps(b, u1, a41);
        b = _mm256_broadcast_ss(v + 5 * (size_t)cin + c);
        a50 = _mm256_fmadd_ps(b, u0, a50);
        a51 = _mm256_fmadd_ps(b, u1, a51);
    }
    _mm256_storeu_ps(m, a00);
    _mm256_storeu_ps(m + 8, a01);
    _mm256_storeu_ps(m + (size_t)cout, a10);
    _mm256_storeu_ps(m + (size_t)cout + 8, a11);
    _mm256_storeu_ps(m + 2 * (size_t)cout, a20);
    _mm256_storeu_ps(m + 2 * (size_t)cout + 8, a21);
    _mm256_storeu_ps(m + 3 * (size_t)cout, a30);
    _mm256_storeu_ps(m + 3 * (size_t)cout + 8, a31);
    _mm256_storeu_ps(m + 4 * (size_t)cout, a40);
    _mm256_storeu_ps(m + 4 * (size_t)cout + 8, a41);
    _mm256_storeu_ps(m + 5 * (size_t)cout, a50);
    _mm256_storeu_ps(m + 5 * (size_t)cout + 8, a51);
}

/* y of the block's n tiles from M[xi][k][f]; outputs past an edge are not
 * stored. With stream (y 32-byte aligned), non-temporal stores: y is
 * written once and read only after the whole call (by batchnorm, the next
 * layer), and a tower's 16-channel outputs (8 MB) leave the cache anyway,
 * so the stores skip reading each line before writing it. ResNet-20's
 * layers 1.05-1.3x (forward, and backward through its dx), training 1.07x
 * (TT_CPU_ISA=avx2, 5 interleaved rounds). */
TARGET_AVX2 static void output_transform(int h, int w, int cout, const float *mm, int t0, int n,
                                         bool stream, float *y)
{
    size_t plane = (size_t)WINO_TILES * cout;
    for (int k = 0; k < n; k++) {
        int oy, ox;
        float *img = (float *)tile_at(y, h, w, cout, t0 + k, &oy, &ox);
        int rows = h - oy < 4 ? h - oy : 4, cols = w - ox < 4 ? w - ox : 4;
        for (int f = 0; f < cout; f += 8) {
            const float *in = mm + (size_t)k * cout + f;
            __m256 s[6][4]; /* s[j] = A^T times column j; then each row of s A */
            for (int j = 0; j < 6; j++) {
                __m256 m[6];
                for (int i = 0; i < 6; i++)
                    m[i] = _mm256_loadu_ps(in + (size_t)(i * 6 + j) * plane);
                a_transform(m, s[j]);
            }
            for (int i = 0; i < rows; i++) {
                __m256 row[6] = {s[0][i], s[1][i], s[2][i], s[3][i], s[4][i], s[5][i]}, o[4];
                a_transform(row, o);
                float *out = img + ((size_t)(oy + i) * w + ox) * cout + f;
                for (int j = 0; j < cols; j++)
                    if (stream)
                        _mm256_stream_ps(out + (size_t)j * cout, o[j]);
                    else
                        _mm256_storeu_ps(out + (size_t)j * cout, o[j]);
            }
        }
    }
}

/* dM[xi][k][f] = (A dY A^T)[xi] of the block's n tiles, dY a tile's 4x4
 * gradients of channel f (zeros past an edge). */
TARGET_AVX2 static void grad_transform(int h, int w, int cout, const float *dy, int t0, int n,
                                       float *dm)
{
    size_t plane = (size_t)WINO_TILES * cout;
    for (int k = 0; k < n; k++) {
        int oy, ox;
        const float *img = tile_at(dy, h, w, cout, t0 + k, &oy, &ox);
        int rows = h - oy < 4 ? h - oy : 4, cols = w - ox < 4 ? w - ox : 4;
        for (int f = 0; f < cout; f += 8) {
            __m256 t[4][6]; /* t[j] = A times column j; then each row of t A^T */
            for (int j = 0; j < 4; j++) {
                __m256 g[4];
                for (int i = 0; i < 4; i++)
                    g[i] = i < rows && j < cols
                               ? _mm256_loadu_ps(img + ((size_t)(oy + i) * w + ox + j) * cout + f)
                               : _mm256_setzero_ps();
                a_gradient(g, t[j]);
            }
            float *out = dm + (size_t)k * cout + f;
            for (int i = 0; i < 6; i++) {
                __m256 row[4] = {t[0][i], t[1][i], t[2][i], t[3][i]}, o[6];
                a_gradient(row, o);
                for (int j = 0; j < 6; j++)
                    _mm256_storeu_ps(out + (size_t)(i * 6 + j) * plane, o[j]);
            }
        }
    }
}

/* dU[c..c+3][f..f+15] += sum over the n tiles k of V[k][c..] dM[k][f..]
 * (one xi): v [tile][cin], dm [tile][cout], du [cin][cout]. Tiles in
 * order, 8 named registers. */
TARGET_AVX2 static void grad_products_4x16(int n, int cin, int cout, const float *v,
                                           const float *dm, float *du)
{
    float *r0 = du, *r1 = du + cout, *r2 = du + 2 * (size_t)cout, *r3 = du + 3 * (size_t)cout;
    __m256 a00 = _mm256_loadu_ps(r0), a01 = _mm256_loadu_ps(r0 + 8);
    __m256 a10 = _mm256_loadu_ps(r1), a11 = _mm256_loadu_ps(r1 + 8);
    __m256 a20 = _mm256_loadu_ps(r2), a21 = _mm256_loadu_ps(r2 + 8);
    __m256 a30 = _mm256_loadu_ps(r3), a31 = _mm256_loadu_ps(r3 + 8);
    for (int k = 0; k < n; k++) {
        const float *vk = v + (size_t)k * cin, *dk = dm + (size_t)k * cout;
        __m256 g0 = _mm256_loadu_ps(dk), g1 = _mm256_loadu_ps(dk + 8);
        __m256 b = _mm256_broadcast_ss(vk);
        a00 = _mm256_fmadd_ps(b, g0, a00);
        a01 = _mm256_fmadd_ps(b, g1, a01);
        b = _mm256_broadcast_ss(vk + 1);
        a10 = _mm256_fmadd_ps(b, g0, a10);
        a11 = _mm256_fmadd_ps(b, g1, a11);
        b = _mm256_broadcast_ss(vk + 2);
        a20 = _mm256_fmadd_ps(b, g0, a20);
        a21 = _mm256_fmadd_ps(b, g1, a21);
        b = _mm256_broadcast_ss(vk + 3);
        a30 = _mm256_fmadd_ps(b, g0, a30);
        a31 = _mm256_fmadd_ps(b, g1, a31);
    }
    _mm256_storeu_ps(r0, a00), _mm256_storeu_ps(r0 + 8, a01);
    _mm256_storeu_ps(r1, a10), _mm256_storeu_ps(r1 + 8, a11);
    _mm256_storeu_ps(r2, a20), _mm256_storeu_ps(r2 + 8, a21);
    _mm256_storeu_ps(r3, a30), _mm256_storeu_ps(r3 + 8, a31);
}

/* dw[f][c][3][3] = G^T dU G for each filter, eight filters (f) at a time */
TARGET_AVX2 static void weight_gradient(int c, int f, const float *du, float *dw)
{
    size_t plane = (size_t)c * f;
    for (int i = 0; i < c; i++)
        for (int o = 0; o < f; o += 8) {
            const float *in = du + (size_t)i * f + o;
            __m256 t[6][3]; /* t[j] = G^T times column j; then each row of t G */
            for (int j = 0; j < 6; j++) {
                __m256 u[6];
                for (int r = 0; r < 6; r++)
                    u[r] = _mm256_loadu_ps(in + (size_t)(r * 6 + j) * plane);
                g_gradient(u, t[j]);
            }
            float taps[9][8];
            for (int r = 0; r < 3; r++) {
                __m256 row[6] = {t[0][r], t[1][r], t[2][r], t[3][r], t[4][r], t[5][r]}, g[3];
                g_gradient(row, g);
                for (int s = 0; s < 3; s++)
                    _mm256_storeu_ps(taps[r * 3 + s], g[s]);
            }
            for (int l = 0; l < 8; l++)
                for (int tap = 0; tap < 9; tap++)
                    dw[((size_t)(o + l) * c + i) * 9 + tap] = taps[tap][l];
        }
}

TARGET_AVX2 static void weights_avx2(const float *w, int cout, int cin, float *u)
{
    size_t plane = (size_t)cin * cout;
    for (int i = 0; i < cin; i++)
        for (int o = 0; o < cout; o += 8) {
            float taps[9][8];
            for (int l = 0; l < 8; l++)
                for (int tap = 0; tap < 9; tap++)
                    taps[tap][l] = w[((size_t)(o + l) * cin + i) * 9 + tap];
            __m256 t[3][6]; /* t[j] = G times column j of g; then each row of t G^T */
            for (int j = 0; j < 3; j++) {
                __m256 g[3] = {_mm256_loadu_ps(taps[j]), _mm256_loadu_ps(taps[3 + j]),
                               _mm256_loadu_ps(taps[6 + j])};
                g_transform(g, t[j]);
            }
            float *out = u + (size_t)i * cout + o;
            for (int r = 0; r < 6; r++) {
                __m256 row[3] = {t[0][r], t[1][r], t[2][r]}, v[6];
                g_transform(row, v);
                for (int s = 0; s < 6; s++)
                    _mm256_storeu_ps(out + (size_t)(r * 6 + s) * plane, v[s]);
            }
        }
}
#endif

/* Eight filters at a time. A scalar loop over the filters, storing each
 * one's 36 values 36 planes apart, took 0.65 ms at 64 channels (this one
 * 0.06): as long as the forward of 64 images, on the calling thread while
 * the other waits. */
void cpu_conv_wino_weights(const float *w, int cout, int cin, float *u)
{
#ifdef X86_KERNELS
    weights_avx2(w, cout, cin, u);
#else
    (void)w, (void)cout, (void)cin, (void)u;
#endif
}

/* Blocks in a pipeline: block b's products, xi by xi, with the output
 * transform of block b - 1 (its M kept in a second buffer, in dU's place)
 * a few tiles after each xi. The streamed stores then drain while the
 * multiply-adds run instead of stalling on full write-combining buffers at
 * the end of each block: at 16 channels 32x32 (a tower's 8 MB of outputs,
 * written to memory) the forward went 1.08-1.12x (one thread, 128 images,
 * the data cold); 32 and 64 channels, whose outputs are smaller, unchanged;
 * training ResNet-20 at AVX2 1.02x (12 interleaved rounds). Transforming
 * block b + 1's inputs the same way made the forward take 1.15x as long
 * (measured, not explained: its loads share L1 with the products' V and
 * U), and prefetching them did nothing. */
void cpu_conv_wino_forward(int n, int h, int w, int cin, int cout, const float *x,
                           const float *u, float *y, float *scratch)
{
#ifdef X86_KERNELS
    int tiles = n * ((h + 3) / 4) * ((w + 3) / 4);
    float *v = scratch, *zero = scratch + scratch_zero(cin, cout);
    float *m[2] = {scratch + XI * (size_t)WINO_TILES * cin, scratch_du(scratch, cin, cout)};
    bool stream = (uintptr_t)y % 32 == 0; /* every store then is (cout % 16 == 0) */
    int last_t0 = 0, last_nt = 0, cur = 0; /* the block whose outputs are pending */
    memset(zero, 0, (size_t)cin * sizeof(float));
    for (int t0 = 0; t0 < tiles; t0 += WINO_TILES, cur = !cur) {
        int nt = tiles - t0 < WINO_TILES ? tiles - t0 : WINO_TILES;
        int rows = (nt + WINO_ROWS - 1) / WINO_ROWS * WINO_ROWS, out = 0;
        input_transform(h, w, cin, x, t0, nt, rows, zero, v);
        for (int xi = 0; xi < XI; xi++) {
            const float *vx = v + (size_t)xi * WINO_TILES * cin;
            const float *ux = u + (size_t)xi * cin * cout;
            float *mx = m[cur] + (size_t)xi * WINO_TILES * cout;
            for (int f = 0; f < cout; f += 16)
                for (int k = 0; k < rows; k += WINO_ROWS)
                    products_6x16(cin, cout, vx + (size_t)k * cin, ux + f,
                                  mx + (size_t)k * cout + f);
            int upto = (xi + 1) * last_nt / XI; /* the last block's tiles out by now */
            if (upto > out) {
                output_transform(h, w, cout, m[!cur] + (size_t)out * cout, last_t0 + out,
                                 upto - out, stream, y);
                out = upto;
            }
        }
        last_t0 = t0, last_nt = nt;
    }
    output_transform(h, w, cout, m[!cur], last_t0, last_nt, stream, y);
    if (stream)
        _mm_sfence(); /* the streamed stores done before the task says it is */
#else
    (void)n, (void)h, (void)w, (void)cin, (void)cout, (void)x, (void)u, (void)y, (void)scratch;
#endif
}

void cpu_conv_wino_weight_grad(int n, int h, int w, int c, int f, const float *x,
                               const float *dy, float *scratch, float *dw)
{
#ifdef X86_KERNELS
    int tiles = n * ((h + 3) / 4) * ((w + 3) / 4);
    float *v = scratch, *dm = scratch + XI * (size_t)WINO_TILES * c;
    float *zero = scratch + scratch_zero(c, f), *du = scratch_du(scratch, c, f);
    memset(zero, 0, (size_t)c * sizeof(float));
    memset(du, 0, XI * (size_t)c * f * sizeof(float));
    for (int t0 = 0; t0 < tiles; t0 += WINO_TILES) {
        int nt = tiles - t0 < WINO_TILES ? tiles - t0 : WINO_TILES;
        input_transform(h, w, c, x, t0, nt, nt, zero, v);
        grad_transform(h, w, f, dy, t0, nt, dm);
        for (int xi = 0; xi < XI; xi++)
            for (int ci = 0; ci < c; ci += 4)
                for (int fi = 0; fi < f; fi += 16)
                    grad_products_4x16(nt, c, f, v + (size_t)xi * WINO_TILES * c + ci,
                                       dm + (size_t)xi * WINO_TILES * f + fi,
                                       du + ((size_t)xi * c + ci) * f + fi);
    }
    weight_gradient(c, f, du, dw);
#else
    (void)n, (void)h, (void)w, (void)c, (void)f, (void)x, (void)dy, (void)scratch, (void)dw;
#endif
}
