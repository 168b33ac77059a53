/* device_wait.c - the host's one wait for device work (backend.h,
 * backend_device_wait): polling instead of cudaStreamSynchronize, so that
 * the communicator's asynchronous error and a stop signal are seen while a
 * collective that will never complete (a peer gone) holds the queue. NCCL
 * says only ncclCommAbort ends such an operation; a blocking wait on the
 * stream would never return to call it. A tower with a communicator waits
 * under comm/dist.h's deadline (trainer.collective_timeout), which aborts
 * the communicator before it ends the job. */
#include <time.h>

#include "backend/backend.h"
#include "comm/dist.h"
#include "util/clock.h"

static const volatile sig_atomic_t *stop_flag;

void backend_device_set_stop(const volatile sig_atomic_t *flag)
{
    stop_flag = flag;
}

static void comm_abort(void *c)
{
    ((backend_comm *)c)->abort(c);
}

void backend_device_watch(backend_t *const *bes, int n, backend_comm *c)
{
    for (int t = 0; t < n; t++) {
        bes[t]->watch = c;
        bes[t]->watch_index = t;
    }
    dist_watch_set_hook(c != NULL ? comm_abort : NULL, c);
}

static int queue_query(void *be, tt_err *err)
{
    return ((backend_t *)be)->dev->query(be, err);
}

int backend_device_wait(backend_t *be, const char *what, tt_err *err)
{
    return backend_device_wait_for(be, queue_query, be, what, err);
}

static int device_wait_poll(backend_t *be, int (*query)(void *arg, tt_err *err), void *arg,
                            const char *what, tt_err *err);

int backend_device_wait_for(backend_t *be, int (*query)(void *arg, tt_err *err), void *arg,
                            const char *what, tt_err *err)
{
    if (be->watch == NULL)
        return device_wait_poll(be, query, arg, what, err);
    dist_watch_device_begin();
    int rc = device_wait_poll(be, query, arg, what, err);
    dist_watch_device_end();
    return rc;
}

static int device_wait_poll(backend_t *be, int (*query)(void *arg, tt_err *err), void *arg,
                            const char *what, tt_err *err)
{
    long sleep_ns = 1000;
    double stop_since = 0.0;
    for (;;) {
        int done = query(arg, err);
        if (done != 0)
            return done > 0 ? 0 : -1;
        backend_comm *c = be->watch;
        tt_err comm_err = {0};
        if (c != NULL && c->check(c, be->watch_index, &comm_err) != 0) {
            c->abort(c); /* the queues drain; the caller's results are void */
            return err_set(err, TT_ERR_RUNTIME, "%s: %s (communicator aborted)", what,
                           comm_err.msg);
        }
        if (stop_flag != NULL && *stop_flag != 0) {
            if (stop_since == 0.0) {
                stop_since = clock_s();
            } else if (clock_s() - stop_since > BACKEND_STOP_GRACE_S) {
                if (c != NULL)
                    c->abort(c);
                return err_set(err, TT_ERR_RUNTIME, "%s: not done %d s after signal %d "
                               "(a stalled collective): aborted, no consistent state to save",
                               what, BACKEND_STOP_GRACE_S, (int)*stop_flag);
            }
        }
        /* a wait overshoots the work by up to one sleep, and meanwhile the
         * device may idle: at most 100 us */
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 100000)
            sleep_ns *= 2;
    }
}

typedef struct {
    backend_t *be;
    backend_event *e;
} event_wait;

static int event_wait_query(void *p, tt_err *err)
{
    event_wait *w = p;
    return w->be->dev->event_query(w->be, w->e, err);
}

int backend_device_wait_event(backend_t *be, backend_event *e, const char *what, tt_err *err)
{
    event_wait w = {be, e};
    return backend_device_wait_for(be, event_wait_query, &w, what, err);
}
