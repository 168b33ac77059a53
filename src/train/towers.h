/* towers.h - call_for_each_tower: one persistent thread per tower.
 *
 * As tensorpack's TowerContext: the tower function runs once per tower, on its
 * own thread, with a context that says which tower it is (the trainer's
 * tower_t holds its device and variables). The threads live as long as the
 * team, sleeping between runs, so nothing is created per step.
 */
#ifndef TT_TOWERS_H
#define TT_TOWERS_H


#include "util/err.h"

typedef struct {
    int index; /* 0 .. n-1 */
} tower_context;

typedef void (*tower_fn)(const tower_context *ctx, void *arg);

typedef struct tower_team tower_team;

/* n towers. With one tower no thread is started: the function runs on the
 * caller's thread. */
tower_team *tower_team_create(int n, tt_err *err);

/* Runs fn on every tower at once and returns when all have finished. */
void tower_team_run(tower_team *team, tower_fn fn, void *arg);

void tower_team_free(tower_team *team);

#endif
