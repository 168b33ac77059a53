/* test_mem_pool.c - the GPU tower's memory pool (src/backend/cuda/mem_pool.c)
 * on the CPU: a malloc source stands in for cudaMalloc, so every block can be
 * written and checked for overlap with a shadow model of what is live. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/mem_pool.h"
#include "tt_test.h"

typedef struct {
    int reserves, releases;
    size_t limit;    /* total bytes the "device" has */
    size_t reserved; /* bytes handed out */
} fake_device;

static void *fake_reserve(void *ctx, size_t bytes, char *why, size_t why_len)
{
    fake_device *d = ctx;
    if (d->reserved + bytes > d->limit) {
        snprintf(why, why_len, "cudaMalloc: out of memory (%zu free)", d->limit - d->reserved);
        return NULL;
    }
    void *p = aligned_alloc(MEM_POOL_ALIGN, bytes);
    if (p == NULL) {
        snprintf(why, why_len, "host out of memory");
        return NULL;
    }
    d->reserves++;
    d->reserved += bytes;
    return p;
}

static void fake_release(void *ctx, void *chunk)
{
    fake_device *d = ctx;
    d->releases++;
    free(chunk);
}

static mem_pool *pool_on(fake_device *d, size_t chunk)
{
    mem_source src = {fake_reserve, fake_release, d};
    return mem_pool_create(src, chunk);
}

/* ---- alignment, rounding, one chunk for small buffers ---- */
static void test_basic(void)
{
    fake_device d = {.limit = 1 << 24};
    mem_pool *p = pool_on(&d, 1 << 20);
    tt_err err = {0};
    void *a = mem_pool_alloc(p, 1, &err), *b = mem_pool_alloc(p, 300, &err),
         *c = mem_pool_alloc(p, 0, &err);
    tt_ok(a && b && c && (uintptr_t)a % MEM_POOL_ALIGN == 0 && (uintptr_t)b % MEM_POOL_ALIGN == 0 &&
              (uintptr_t)c % MEM_POOL_ALIGN == 0,
          "blocks of 1, 300 and 0 bytes are %d-byte aligned", MEM_POOL_ALIGN);
    tt_ok((char *)b - (char *)a == MEM_POOL_ALIGN && (char *)c - (char *)b == 2 * MEM_POOL_ALIGN,
          "sizes round up to the alignment and blocks are packed (b-a = %td, c-b = %td)",
          (char *)b - (char *)a, (char *)c - (char *)b);
    mem_pool_stats s;
    mem_pool_get_stats(p, &s);
    tt_ok(d.reserves == 1 && s.chunks == 1 && s.reserved == 1 << 20 && s.blocks == 3 &&
              s.in_use == 4 * MEM_POOL_ALIGN,
          "one chunk reserved, 3 blocks, %zu bytes in use", s.in_use);
    mem_pool_free(p, b);
    mem_pool_get_stats(p, &s);
    tt_ok(s.in_use == 2 * MEM_POOL_ALIGN && s.peak == 4 * MEM_POOL_ALIGN && s.blocks == 2,
          "free: in use %zu, peak stays %zu", s.in_use, s.peak);
    mem_pool_free(p, NULL);
    mem_pool_free(p, (char *)a + 8);
    mem_pool_free(p, b); /* twice */
    tt_ok(mem_pool_bad_frees(p) == 2, "a pointer not from the pool and a double free are "
          "ignored and counted (%d)", mem_pool_bad_frees(p));
    mem_pool_destroy(p);
    tt_ok(d.releases == d.reserves, "destroy releases every chunk (%d of %d)", d.releases,
          d.reserves);
}

/* ---- best fit and coalescing ---- */
static void test_fit_and_merge(void)
{
    fake_device d = {.limit = 1 << 24};
    mem_pool *p = pool_on(&d, 64 * 1024);
    tt_err err = {0};
    void *b[6];
    size_t sizes[6] = {4096, 1024, 4096, 4096, 1024, 4096};
    for (int i = 0; i < 6; i++)
        b[i] = mem_pool_alloc(p, sizes[i], &err);
    mem_pool_free(p, b[0]); /* a 4 KiB hole */
    mem_pool_free(p, b[4]); /* a 1 KiB hole */
    void *x = mem_pool_alloc(p, 1000, &err);
    tt_ok(x == b[4], "best fit: 1000 bytes take the 1 KiB hole, not the 4 KiB one");
    void *y = mem_pool_alloc(p, 4096, &err);
    tt_ok(y == b[0], "an exact fit takes the 4 KiB hole");
    for (int i = 1; i < 4; i++)
        mem_pool_free(p, b[i]);
    mem_pool_free(p, x);
    mem_pool_free(p, y);
    mem_pool_free(p, b[5]);
    mem_pool_stats s;
    mem_pool_get_stats(p, &s);
    tt_ok(s.in_use == 0 && s.largest_free == 64 * 1024, "all freed: neighbours merge back into "
          "one free block of the whole chunk (largest free %zu)", s.largest_free);
    void *whole = mem_pool_alloc(p, 64 * 1024, &err);
    tt_ok(whole != NULL && d.reserves == 1, "the whole chunk is allocatable again, no new chunk");
    mem_pool_destroy(p);
}

/* ---- large requests, freezing, out of memory ---- */
static void test_growth_and_errors(void)
{
    fake_device d = {.limit = 10 << 20};
    mem_pool *p = pool_on(&d, 1 << 20);
    tt_err err = {0};
    void *big = mem_pool_alloc(p, (3 << 20) + 5, &err);
    mem_pool_stats s;
    mem_pool_get_stats(p, &s);
    tt_ok(big != NULL && s.chunks == 1 && s.reserved == (3 << 20) + MEM_POOL_ALIGN,
          "a request above the chunk size gets a chunk of its own size (%zu)", s.reserved);
    void *small = mem_pool_alloc(p, 1000, &err);
    mem_pool_get_stats(p, &s);
    tt_ok(small != NULL && s.chunks == 2, "then a small one opens a normal chunk");

    void *huge = mem_pool_alloc(p, 64 << 20, &err);
    tt_ok(huge == NULL && err.code == TT_ERR_RUNTIME && strstr(err.msg, "asked 67108864 bytes") &&
              strstr(err.msg, "64.0 MiB") && strstr(err.msg, "cudaMalloc: out of memory"),
          "out of device memory names the bytes asked and the source's reason (%s)", err.msg);
    err_clear(&err);

    mem_pool_freeze(p);
    int before = d.reserves;
    void *fits = mem_pool_alloc(p, 4096, &err);
    tt_ok(fits != NULL && err.code == TT_OK, "frozen: a block that fits in free space is given");
    void *nofit = mem_pool_alloc(p, 2 << 20, &err);
    tt_ok(nofit == NULL && d.reserves == before && strstr(err.msg, "after setup") &&
              strstr(err.msg, "asked 2097152 bytes"),
          "frozen: no new chunk, the error says so (%s)", err.msg);
    tt_ok(mem_pool_frozen(p), "mem_pool_frozen");
    mem_pool_destroy(p);
    tt_ok(d.releases == d.reserves, "every chunk released");
}

/* ---- random alloc/free against a shadow model ---- */
static void test_random(void)
{
    fake_device d = {.limit = (size_t)1 << 30};
    mem_pool *p = pool_on(&d, 256 * 1024);
    enum { LIVE = 200 };
    unsigned char *ptr[LIVE] = {0};
    size_t len[LIVE] = {0};
    uint64_t s = 12345;
    tt_err err = {0};
    int bad = 0, ops = 0;
    for (int it = 0; it < 20000; it++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        int k = (int)((s >> 33) % LIVE);
        if (ptr[k] != NULL) {
            for (size_t q = 0; q < len[k]; q++)
                if (ptr[k][q] != (unsigned char)k) {
                    bad++;
                    break;
                }
            mem_pool_free(p, ptr[k]);
            ptr[k] = NULL;
        } else {
            size_t n = 1 + (size_t)((s >> 13) % ((s >> 60) < 2 ? 300000 : 5000));
            ptr[k] = mem_pool_alloc(p, n, &err);
            if (ptr[k] == NULL || (uintptr_t)ptr[k] % MEM_POOL_ALIGN) {
                bad++;
                continue;
            }
            len[k] = n;
            memset(ptr[k], k, n); /* overwrites a neighbour if blocks overlap */
        }
        ops++;
    }
    for (int k = 0; k < LIVE; k++)
        if (ptr[k] != NULL) {
            for (size_t q = 0; q < len[k]; q++)
                if (ptr[k][q] != (unsigned char)k) {
                    bad++;
                    break;
                }
            mem_pool_free(p, ptr[k]);
        }
    mem_pool_stats st;
    mem_pool_get_stats(p, &st);
    tt_ok(bad == 0 && ops == 20000, "20000 random allocs and frees: aligned, no block "
          "overwrites another (%d bad)", bad);
    tt_ok(st.in_use == 0 && st.blocks == 0 && mem_pool_bad_frees(p) == 0,
          "everything freed: nothing in use (%zu)", st.in_use);
    /* every chunk is one free block again: the largest free is the largest chunk */
    tt_ok(st.largest_free >= 256 * 1024, "coalescing restored whole chunks (largest free %zu)",
          st.largest_free);
    mem_pool_destroy(p);
}

static void test_format(void)
{
    char b[32];
    mem_format_bytes(512, b, sizeof(b));
    int ok = strcmp(b, "512 B") == 0;
    mem_format_bytes(3584, b, sizeof(b));
    ok &= strcmp(b, "3.5 KiB") == 0;
    mem_format_bytes((size_t)5 << 30, b, sizeof(b));
    ok &= strcmp(b, "5.0 GiB") == 0;
    tt_ok(ok, "mem_format_bytes: 512 B, 3.5 KiB, 5.0 GiB");
}

int main(void)
{
    test_basic();
    test_fit_and_merge();
    test_growth_and_errors();
    test_random();
    test_format();
    return tt_done();
}
