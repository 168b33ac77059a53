/* mem_pool.c - best-fit sub-allocation over chunks, with coalescing.
 *
 * The bookkeeping lives on the host: one array of blocks sorted by address,
 * each a range of one chunk, allocated or free. Allocation takes the smallest
 * free block that fits (best fit keeps big blocks for big buffers) and splits
 * off the rest; freeing merges the block with free neighbours of the same
 * chunk. A tower has a few hundred buffers, all made at setup, so linear
 * scans are fine and keep the code obvious.
 */
#include "backend/mem_pool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uintptr_t addr;
    size_t size;
    int chunk; /* index into chunks */
    bool used;
} mem_block;

typedef struct {
    void *base;
    size_t size;
} mem_chunk;

struct mem_pool {
    mem_source src;
    size_t chunk_bytes;
    bool frozen;
    mem_chunk *chunks;
    int n_chunks, cap_chunks;
    mem_block *blocks; /* sorted by addr */
    int n_blocks, cap_blocks;
    size_t in_use, peak;
    int bad_frees;
};

void mem_format_bytes(size_t bytes, char *buf, size_t len)
{
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%zu B", bytes);
        return;
    }
    double v = (double)bytes / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.1f %s", v, units[u]);
}

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

mem_pool *mem_pool_create(mem_source src, size_t chunk_bytes)
{
    mem_pool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->src = src;
    p->chunk_bytes = round_up(chunk_bytes > 0 ? chunk_bytes : MEM_POOL_ALIGN, MEM_POOL_ALIGN);
    return p;
}

/* Makes room for one more block in the array; -1 when out of host memory. */
static int grow_blocks(mem_pool *p)
{
    if (p->n_blocks < p->cap_blocks)
        return 0;
    int cap = p->cap_blocks ? 2 * p->cap_blocks : 64;
    mem_block *b = realloc(p->blocks, (size_t)cap * sizeof(*b));
    if (b == NULL)
        return -1;
    p->blocks = b;
    p->cap_blocks = cap;
    return 0;
}

static void insert_block(mem_pool *p, int at, mem_block b)
{
    memmove(&p->blocks[at + 1], &p->blocks[at], (size_t)(p->n_blocks - at) * sizeof(b));
    p->blocks[at] = b;
    p->n_blocks++;
}

static void remove_block(mem_pool *p, int at)
{
    memmove(&p->blocks[at], &p->blocks[at + 1], (size_t)(p->n_blocks - at - 1) * sizeof(mem_block));
    p->n_blocks--;
}

/* The free block that fits `size` best, or -1. */
static int best_fit(const mem_pool *p, size_t size)
{
    int best = -1;
    for (int i = 0; i < p->n_blocks; i++) {
        const mem_block *b = &p->blocks[i];
        if (!b->used && b->size >= size && (best < 0 || b->size < p->blocks[best].size))
            best = i;
    }
    return best;
}

static size_t largest_free(const mem_pool *p)
{
    size_t l = 0;
    for (int i = 0; i < p->n_blocks; i++)
        if (!p->blocks[i].used && p->blocks[i].size > l)
            l = p->blocks[i].size;
    return l;
}

/* Reserves a chunk of at least `size` and adds it as one free block; returns
 * the block's index or -1 with why filled. */
static int add_chunk(mem_pool *p, size_t size, char *why, size_t why_len)
{
    size_t bytes = size > p->chunk_bytes ? size : p->chunk_bytes;
    if (p->n_chunks == p->cap_chunks) {
        int cap = p->cap_chunks ? 2 * p->cap_chunks : 8;
        mem_chunk *c = realloc(p->chunks, (size_t)cap * sizeof(*c));
        if (c == NULL) {
            snprintf(why, why_len, "out of host memory");
            return -1;
        }
        p->chunks = c;
        p->cap_chunks = cap;
    }
    if (grow_blocks(p) != 0) {
        snprintf(why, why_len, "out of host memory");
        return -1;
    }
    void *base = p->src.reserve(p->src.ctx, bytes, why, why_len);
    if (base == NULL)
        return -1;
    if ((uintptr_t)base % MEM_POOL_ALIGN != 0) {
        /* cudaMalloc aligns to 256 bytes at least; a source that does not is a bug */
        p->src.release(p->src.ctx, base);
        snprintf(why, why_len, "the memory source returned a misaligned chunk");
        return -1;
    }
    p->chunks[p->n_chunks] = (mem_chunk){base, bytes};
    mem_block b = {(uintptr_t)base, bytes, p->n_chunks, false};
    p->n_chunks++;
    int at = 0;
    while (at < p->n_blocks && p->blocks[at].addr < b.addr)
        at++;
    insert_block(p, at, b);
    return at;
}

void *mem_pool_alloc(mem_pool *p, size_t bytes, tt_err *err)
{
    size_t size = round_up(bytes > 0 ? bytes : 1, MEM_POOL_ALIGN);
    if (size < bytes) { /* overflow */
        err_set(err, TT_ERR_RUNTIME, "out of device memory: asked %zu bytes", bytes);
        return NULL;
    }
    int i = best_fit(p, size);
    if (i < 0) {
        char why[256] = "", asked[32], held[32], fits[32];
        mem_format_bytes(bytes, asked, sizeof(asked));
        mem_format_bytes(p->in_use, held, sizeof(held));
        mem_format_bytes(largest_free(p), fits, sizeof(fits));
        if (p->frozen) {
            err_set(err, TT_ERR_RUNTIME, "out of device memory: asked %zu bytes (%s) after setup, "
                    "when the pool no longer grows (%s in use, the largest free block %s)",
                    bytes, asked, held, fits);
            return NULL;
        }
        i = add_chunk(p, size, why, sizeof(why));
        if (i < 0) {
            err_set(err, TT_ERR_RUNTIME, "out of device memory: asked %zu bytes (%s) with %s "
                    "already in use: %s", bytes, asked, held, why);
            return NULL;
        }
    }
    if (grow_blocks(p) != 0) {
        err_set(err, TT_ERR_RUNTIME, "out of host memory");
        return NULL;
    }
    mem_block *b = &p->blocks[i];
    if (b->size > size) { /* split: the rest stays free, right after */
        mem_block rest = {b->addr + size, b->size - size, b->chunk, false};
        b->size = size;
        insert_block(p, i + 1, rest);
        b = &p->blocks[i];
    }
    b->used = true;
    p->in_use += size;
    if (p->in_use > p->peak)
        p->peak = p->in_use;
    return (void *)b->addr;
}

static int find_block(const mem_pool *p, uintptr_t addr)
{
    int lo = 0, hi = p->n_blocks - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (p->blocks[mid].addr == addr)
            return mid;
        if (p->blocks[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

void mem_pool_free(mem_pool *p, void *ptr)
{
    if (p == NULL || ptr == NULL)
        return;
    int i = find_block(p, (uintptr_t)ptr);
    if (i < 0 || !p->blocks[i].used) {
        p->bad_frees++;
        return;
    }
    p->blocks[i].used = false;
    p->in_use -= p->blocks[i].size;
    /* merge with the next, then with the previous, within the chunk */
    if (i + 1 < p->n_blocks && !p->blocks[i + 1].used &&
        p->blocks[i + 1].chunk == p->blocks[i].chunk) {
        p->blocks[i].size += p->blocks[i + 1].size;
        remove_block(p, i + 1);
    }
    if (i > 0 && !p->blocks[i - 1].used && p->blocks[i - 1].chunk == p->blocks[i].chunk) {
        p->blocks[i - 1].size += p->blocks[i].size;
        remove_block(p, i);
    }
}

void mem_pool_freeze(mem_pool *p)
{
    p->frozen = true;
}

bool mem_pool_frozen(const mem_pool *p)
{
    return p->frozen;
}

void mem_pool_get_stats(const mem_pool *p, mem_pool_stats *s)
{
    memset(s, 0, sizeof(*s));
    for (int c = 0; c < p->n_chunks; c++)
        s->reserved += p->chunks[c].size;
    for (int i = 0; i < p->n_blocks; i++)
        s->blocks += p->blocks[i].used;
    s->in_use = p->in_use;
    s->peak = p->peak;
    s->largest_free = largest_free(p);
    s->chunks = p->n_chunks;
}

int mem_pool_bad_frees(const mem_pool *p)
{
    return p->bad_frees;
}

void mem_pool_destroy(mem_pool *p)
{
    if (p == NULL)
        return;
    for (int c = 0; c < p->n_chunks; c++)
        p->src.release(p->src.ctx, p->chunks[c].base);
    free(p->chunks);
    free(p->blocks);
    free(p);
}
