/* conv_wino.c - 3x3, stride-1, padding-1 convolutions by Winograd's minimal
 * filtering F(2x2, 3x3) (Lavin and Gray, 2016), AVX2 + FMA, NHWC.
 *
 * Why: below AVX-512 oneDNN has no Winograd kernels, and its direct ones
 * run ResNet-20's convolutions at 70-90% of the core's multiply-add rate,
 * so no direct convolution can go much faster; F(2x2, 3x3) computes each
 * 2x2 block of outputs with 16 products per channel pair instead of 36.
 * One thread, batch 32, against oneDNN's forward (NHWC, AVX2, a Zen 5
 * capped): 16 -> 16 channels at 32x32 1.05 against 1.59 ms (1.33 for its
 * backward-data dual), 32 at 16x16 0.80 / 1.14, 64 at 8x8 0.83 / 1.12.
 * ResNet-20's training (TT_CPU_ISA=avx2, 4 interleaved rounds each) with
 * the forward and backward-data passes here: 1.19x; with backward-weights
 * too: 1.37x.
 *
 * An image's output is cut into 2x2 tiles (the last row and column of
 * tiles hang over an odd edge; their outside outputs are not stored), the
 * tiles taken WINO_TILES at a time so that a block's transforms stay in L2:
 *   V[xi][t][c] = (B^T d B)[xi]   d: tile t's 4x4 inputs of channel c (zeros
 *                                 outside the image: the padding)
 *   M[xi][t][f] = sum over c of V[xi][t][c] U[xi][c][f]   16 products
 *   y           = A^T M A         the tile's 2x2 outputs of channel f
 * with U = G g G^T per filter (cpu_conv_wino_weights) and
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 * Exact algebra (the entries are 0, +-1, +-1/2); in float32 the sums run
 * in another order than a direct convolution's, as close to float64
 * (test_cpu_isa_kernels bounds it). Each image on its own, in a fixed
 * order: the same bits on any number of threads.
 *
 * Backward-data is the forward of the transposed convolution (dy in, dx
 * out, the filters transposed and flipped: cpu_conv_flip_weights).
 * Backward-weights differentiates the forward's algebra: with
 * dM = A dY A^T per tile (dY its 2x2 gradients),
 *   dU[xi][c][f] = sum over tiles (and a group's images, in order) of
 *                  V[xi][t][c] dM[xi][t][f]
 *   dw           = G^T dU G   per filter. */
#include "backend/cpu/conv_wino.h"

#include <string.h>

#include "backend/cpu/simd_target.h"

#ifdef X86_KERNELS
#include <immintrin.h>
#endif

#define WINO_TILES 24 /* tiles a block: V and M of a block stay in L2 */
#define WINO_ROWS 6   /* tiles a product kernel: 6 x 16 sums in 12 registers */

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
    return 16 * (size_t)cin * cout;
}

size_t cpu_conv_wino_scratch_floats(int cin, int cout)
{
    /* a block's V and M (or dM), and the weight gradient's dU */
    return 16 * (size_t)WINO_TILES * (size_t)(cin + cout) + 16 * (size_t)cin * cout;
}

void cpu_conv_flip_weights(const float *w, int f, int c, int k, float *wf)
{
    size_t kk = (size_t)k * k;
    for (int i = 0; i < c; i++)
        for (int o = 0; o < f; o++)
            for (size_t t = 0; t < kk; t++)
                wf[((size_t)i * f + o) * kk + t] = w[((size_t)o * c + i) * kk + (kk - 1 - t)];
}

void cpu_conv_wino_weights(const float *w, int cout, int cin, float *u)
{
    for (int o = 0; o < cout; o++)
        for (int i = 0; i < cin; i++) {
            const float(*g)[3] = (const float(*)[3])(w + ((size_t)o * cin + i) * 9);
            float t[4][3]; /* G g */
            for (int j = 0; j < 3; j++) {
                t[0][j] = g[0][j];
                t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
                t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
                t[3][j] = g[2][j];
            }
            for (int r = 0; r < 4; r++) { /* (G g) G^T */
                float v[4] = {t[r][0], 0.5f * (t[r][0] + t[r][1] + t[r][2]),
                              0.5f * (t[r][0] - t[r][1] + t[r][2]), t[r][2]};
                for (int s = 0; s < 4; s++)
                    u[((size_t)(r * 4 + s) * cin + i) * cout + o] = v[s];
            }
        }
}

#ifdef X86_KERNELS
/* V[xi][k][c] of the block's tiles k < n (rows n..rows zero, so that the
 * product kernel runs whole groups of WINO_ROWS); a tile inside the image
 * reads its 16 pixels unchecked, one on an edge reads zeros outside. */
TARGET_AVX2 static void input_transform(int h, int w, int cin, const float *x, int tw, int t0,
                                        int n, int rows, float *v)
{
    size_t plane = (size_t)WINO_TILES * cin;
    for (int k = 0; k < rows; k++) {
        if (k >= n) {
            for (int xi = 0; xi < 16; xi++)
                memset(v + xi * plane + (size_t)k * cin, 0, (size_t)cin * sizeof(float));
            continue;
        }
        int ty = (t0 + k) / tw, tx = (t0 + k) % tw;
        int iy0 = 2 * ty - 1, ix0 = 2 * tx - 1;
        bool inside = iy0 >= 0 && ix0 >= 0 && iy0 + 3 < h && ix0 + 3 < w;
        for (int c = 0; c < cin; c += 8) {
            __m256 d[4][4];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    int iy = iy0 + i, ix = ix0 + j;
                    d[i][j] = inside || (iy >= 0 && iy < h && ix >= 0 && ix < w)
                                  ? _mm256_loadu_ps(x + ((size_t)iy * w + ix) * cin + c)
                                  : _mm256_setzero_ps();
                }
            __m256 t[4][4]; /* B^T d, then (B^T d) B into the 16 planes */
            for (int j = 0; j < 4; j++) {
                t[0][j] = _mm256_sub_ps(d[0][j], d[2][j]);
                t[1][j] = _mm256_add_ps(d[1][j], d[2][j]);
                t[2][j] = _mm256_sub_ps(d[2][j], d[1][j]);
                t[3][j] = _mm256_sub_ps(d[1][j], d[3][j]);
            }
            float *out = v + (size_t)k * cin + c;
            for (int i = 0; i < 4; i++) {
                _mm256_storeu_ps(out + (i * 4 + 0) * plane, _mm256_sub_ps(t[i][0], t[i][2]));
                _mm256_storeu_ps(out + (i * 4 + 1) * plane, _mm256_add_ps(t[i][1], t[i][2]));
                _mm256_storeu_ps(out + (i * 4 + 2) * plane, _mm256_sub_ps(t[i][2], t[i][1]));
                _mm256_storeu_ps(out + (i * 4 + 3) * plane, _mm256_sub_ps(t[i][1], t[i][3]));
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

/* y of the block's n tiles from M[xi][k][f]; outputs past an odd edge are
 * not stored. */
TARGET_AVX2 static void output_transform(int h, int w, int cout, const float *mm, int tw,
                                         int t0, int n, float *y)
{
    size_t plane = (size_t)WINO_TILES * cout;
    for (int k = 0; k < n; k++) {
        int oy = 2 * ((t0 + k) / tw), ox = 2 * ((t0 + k) % tw);
        for (int f = 0; f < cout; f += 8) {
            const float *in = mm + (size_t)k * cout + f;
            __m256 s0[4], s1[4]; /* A^T m, then (A^T m) A: the 2x2 outputs */
            for (int j = 0; j < 4; j++) {
                __m256 m0 = _mm256_loadu_ps(in + (0 * 4 + j) * plane);
                __m256 m1 = _mm256_loadu_ps(in + (1 * 4 + j) * plane);
                __m256 m2 = _mm256_loadu_ps(in + (2 * 4 + j) * plane);
                __m256 m3 = _mm256_loadu_ps(in + (3 * 4 + j) * plane);
                s0[j] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
                s1[j] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
            }
            float *out = y + ((size_t)oy * w + ox) * cout + f;
            _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), s0[2]));
            if (ox + 1 < w)
                _mm256_storeu_ps(out + cout, _mm256_sub_ps(_mm256_sub_ps(s0[1], s0[2]), s0[3]));
            if (oy + 1 < h) {
                out += (size_t)w * cout;
                _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), s1[2]));
                if (ox + 1 < w)
                    _mm256_storeu_ps(out + cout,
                                     _mm256_sub_ps(_mm256_sub_ps(s1[1], s1[2]), s1[3]));
            }
        }
    }
}


/* dM[xi][k][f] = (A dY A^T)[xi] of the block's n tiles, dY a tile's 2x2
 * gradients of channel f (zeros past an odd edge), A = (A^T)^T. */
TARGET_AVX2 static void grad_transform(int h, int w, int cout, const float *dy, int tw, int t0,
                                       int n, float *dm)
{
    size_t plane = (size_t)WINO_TILES * cout;
    __m256 zero = _mm256_setzero_ps();
    for (int k = 0; k < n; k++) {
        int oy = 2 * ((t0 + k) / tw), ox = 2 * ((t0 + k) % tw);
        bool right = ox + 1 < w, below = oy + 1 < h;
        for (int f = 0; f < cout; f += 8) {
            const float *in = dy + ((size_t)oy * w + ox) * cout + f;
            __m256 d00 = _mm256_loadu_ps(in);
            __m256 d01 = right ? _mm256_loadu_ps(in + cout) : zero;
            __m256 d10 = below ? _mm256_loadu_ps(in + (size_t)w * cout) : zero;
            __m256 d11 = right && below ? _mm256_loadu_ps(in + (size_t)w * cout + cout) : zero;
            /* t = A dY (4 x 2): rows dY0, dY0 + dY1, dY0 - dY1, -dY1 */
            __m256 t[4][2] = {{d00, d01},
                              {_mm256_add_ps(d00, d10), _mm256_add_ps(d01, d11)},
                              {_mm256_sub_ps(d00, d10), _mm256_sub_ps(d01, d11)},
                              {_mm256_sub_ps(zero, d10), _mm256_sub_ps(zero, d11)}};
            float *out = dm + (size_t)k * cout + f;
            for (int r = 0; r < 4; r++) { /* t A^T: the same on the columns */
                _mm256_storeu_ps(out + (r * 4 + 0) * plane, t[r][0]);
                _mm256_storeu_ps(out + (r * 4 + 1) * plane, _mm256_add_ps(t[r][0], t[r][1]));
                _mm256_storeu_ps(out + (r * 4 + 2) * plane, _mm256_sub_ps(t[r][0], t[r][1]));
                _mm256_storeu_ps(out + (r * 4 + 3) * plane, _mm256_sub_ps(zero, t[r][1]));
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
#endif

/* The weight gradient's dU in a scratch, after the block's V and dM */
static float *scratch_du(float *scratch, int c, int f)
{
    return scratch + 16 * (size_t)WINO_TILES * (size_t)(c + f);
}

void cpu_conv_wino_dw_begin(int c, int f, float *scratch)
{
    memset(scratch_du(scratch, c, f), 0, 16 * (size_t)c * f * sizeof(float));
}

void cpu_conv_wino_dw_image(int h, int w, int c, int f, const float *x, const float *dy,
                            float *scratch)
{
#ifdef X86_KERNELS
    int th = (h + 1) / 2, tw = (w + 1) / 2, tiles = th * tw;
    float *v = scratch, *dm = scratch + 16 * (size_t)WINO_TILES * c;
    float *du = scratch_du(scratch, c, f);
    for (int t0 = 0; t0 < tiles; t0 += WINO_TILES) {
        int n = tiles - t0 < WINO_TILES ? tiles - t0 : WINO_TILES;
        input_transform(h, w, c, x, tw, t0, n, n, v);
        grad_transform(h, w, f, dy, tw, t0, n, dm);
        for (int xi = 0; xi < 16; xi++)
            for (int ci = 0; ci < c; ci += 4)
                for (int fi = 0; fi < f; fi += 16)
                    grad_products_4x16(n, c, f, v + (size_t)xi * WINO_TILES * c + ci,
                                       dm + (size_t)xi * WINO_TILES * f + fi,
                                       du + ((size_t)xi * c + ci) * f + fi);
    }
#else
    (void)h, (void)w, (void)c, (void)f, (void)x, (void)dy, (void)scratch;
#endif
}

void cpu_conv_wino_dw_end(int c, int f, float *scratch, float *dw)
{
    const float *du = scratch_du(scratch, c, f);
    for (int o = 0; o < f; o++)
        for (int i = 0; i < c; i++) {
            float u[4][4], t[3][4];
            for (int xi = 0; xi < 16; xi++)
                u[xi / 4][xi % 4] = du[((size_t)xi * c + i) * f + o];
            for (int b = 0; b < 4; b++) { /* G^T dU */
                t[0][b] = u[0][b] + 0.5f * (u[1][b] + u[2][b]);
                t[1][b] = 0.5f * (u[1][b] - u[2][b]);
                t[2][b] = 0.5f * (u[1][b] + u[2][b]) + u[3][b];
            }
            float *g = dw + ((size_t)o * c + i) * 9;
            for (int r = 0; r < 3; r++) { /* (G^T dU) G */
                g[r * 3 + 0] = t[r][0] + 0.5f * (t[r][1] + t[r][2]);
                g[r * 3 + 1] = 0.5f * (t[r][1] - t[r][2]);
                g[r * 3 + 2] = 0.5f * (t[r][1] + t[r][2]) + t[r][3];
            }
        }
}

void cpu_conv_wino_image(int h, int w, int cin, int cout, const float *x, const float *u,
                         float *y, float *scratch)
{
#ifdef X86_KERNELS
    int th = (h + 1) / 2, tw = (w + 1) / 2, tiles = th * tw;
    float *v = scratch, *m = scratch + 16 * (size_t)WINO_TILES * cin;
    for (int t0 = 0; t0 < tiles; t0 += WINO_TILES) {
        int n = tiles - t0 < WINO_TILES ? tiles - t0 : WINO_TILES;
        int rows = (n + WINO_ROWS - 1) / WINO_ROWS * WINO_ROWS;
        input_transform(h, w, cin, x, tw, t0, n, rows, v);
        for (int xi = 0; xi < 16; xi++) {
            const float *vx = v + (size_t)xi * WINO_TILES * cin;
            const float *ux = u + (size_t)xi * cin * cout;
            float *mx = m + (size_t)xi * WINO_TILES * cout;
            for (int f = 0; f < cout; f += 16)
                for (int k = 0; k < rows; k += WINO_ROWS)
                    products_6x16(cin, cout, vx + (size_t)k * cin, ux + f,
                                  mx + (size_t)k * cout + f);
        }
        output_transform(h, w, cout, m, tw, t0, n, y);
    }
#else
    (void)h, (void)w, (void)cin, (void)cout, (void)x, (void)u, (void)y, (void)scratch;
#endif
}
