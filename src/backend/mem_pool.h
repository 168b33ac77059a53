/* mem_pool.h - one tower's device memory: a sub-allocator over a few large
 * chunks, so that a training step never calls cudaMalloc or cudaFree.
 *
 * The tower's buffers (parameters, gradients, activations, workspaces) are
 * all allocated while the trainer sets up; the pool reserves a chunk from its
 * source (cudaMalloc) whenever no free block fits. mem_pool_freeze() ends
 * setup: from then on the pool never reserves again, and an allocation that
 * does not fit in what is free fails (it would have stalled the device).
 *
 * Plain C and GPU-independent: the pool only does arithmetic on addresses it
 * never dereferences, so the CPU unit tests (tests/test_mem_pool.c) drive it
 * with a malloc source. Every block is MEM_POOL_ALIGN-aligned, as cudaMalloc's
 * own pointers are (coalesced loads, cuDNN and NCCL alignment rules).
 */
#ifndef TT_MEM_POOL_H
#define TT_MEM_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

#define MEM_POOL_ALIGN 256

/* Where chunks come from. reserve returns NULL and says why (one phrase,
 * e.g. "cudaMalloc: out of memory (1.2 GiB free of 79.1 GiB)") when there is
 * no room. */
typedef struct {
    void *(*reserve)(void *ctx, size_t bytes, char *why, size_t why_len);
    void (*release)(void *ctx, void *chunk);
    void *ctx;
} mem_source;

typedef struct mem_pool mem_pool;

typedef struct {
    size_t reserved;     /* bytes of all chunks */
    size_t in_use;       /* bytes of allocated blocks (after rounding) */
    size_t peak;         /* largest in_use seen */
    size_t largest_free; /* the largest allocation that would fit now */
    int chunks, blocks;  /* blocks: allocated ones */
} mem_pool_stats;

/* A pool reserving chunks of at least chunk_bytes (a larger request gets a
 * chunk of its own size). NULL when out of host memory. */
mem_pool *mem_pool_create(mem_source src, size_t chunk_bytes);

/* A block of at least `bytes` (0 counts as 1), aligned to MEM_POOL_ALIGN.
 * NULL with err set (TT_ERR_RUNTIME) naming the bytes asked when it cannot. */
void *mem_pool_alloc(mem_pool *p, size_t bytes, tt_err *err);

/* Returns a block; NULL is ignored. A pointer the pool did not give is
 * ignored too (and counted in mem_pool_bad_frees). */
void mem_pool_free(mem_pool *p, void *ptr);

/* Ends setup: no more chunks. Idempotent. */
void mem_pool_freeze(mem_pool *p);
bool mem_pool_frozen(const mem_pool *p);

void mem_pool_get_stats(const mem_pool *p, mem_pool_stats *s);
int mem_pool_bad_frees(const mem_pool *p);

/* Releases every chunk (blocks still allocated go with them). */
void mem_pool_destroy(mem_pool *p);

/* "512 B", "3.5 KiB", "1.2 GiB": for messages. */
void mem_format_bytes(size_t bytes, char *buf, size_t len);

#endif
