/* tower_threads.h - call_for_each_tower: one persistent thread per tower.
 *
 * A tower is the replica of the model on one device (model.h's tower_t: its
 * backend and variables); these are the threads that drive the towers. As
 * tensorpack's TowerContext: the tower function runs once per tower, on its
 * own thread, with a context that says which tower it is. The threads live
 * as long as the set, sleeping between runs, so nothing is created per step.
 */
#ifndef TT_TOWER_THREADS_H
#define TT_TOWER_THREADS_H


#include "util/err.h"

typedef struct {
    int index; /* 0 .. n-1 */
} tower_context;

typedef void (*tower_fn)(const tower_context *ctx, void *arg);

typedef struct tower_threads tower_threads;

/* n towers. With one tower no thread is started: the function runs on the
 * caller's thread. */
tower_threads *tower_threads_create(int n, tt_err *err);

/* Runs fn on every tower at once and returns when all have finished. */
void tower_threads_run(tower_threads *team, tower_fn fn, void *arg);

void tower_threads_free(tower_threads *team);

#endif
