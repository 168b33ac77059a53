/* staging.c - staging_ring.h's decisions carried out with backend.h's
 * device primitives (staging.h): pinned buffers (host_alloc), a copy queue,
 * and per slot a copy event and a consumed event. The same code on CUDA
 * and on sim, where the copy queue is a thread of its own: the compute
 * queue's wait for the copy event is what makes the step read its batch. */
#include "backend/staging.h"

#include <stdlib.h>
#include <string.h>

#include "backend/staging_ring.h"

struct staging {
    backend_t *be;
    const backend_device_ops *dev;
    backend_queue *copy;           /* the copy queue */
    size_t x_bytes, y_bytes;
    void *host_x[2], *host_y[2];   /* pinned */
    float *dev_x[2];
    int32_t *dev_y[2];
    backend_event *copied[2], *consumed[2];
    staging_ring ring;
    int current;                   /* the slot the compute has taken, -1: none */
};

void staging_free(staging *s)
{
    if (s == NULL)
        return;
    backend_t *be = s->be;
    /* the copy queue drains first (queue_free waits for it), then nothing
     * reads the buffers or records the events */
    s->dev->queue_free(be, s->copy);
    for (int i = 0; i < 2; i++) {
        s->dev->host_free(be, s->host_x[i]);
        s->dev->host_free(be, s->host_y[i]);
        be->free(be, s->dev_x[i]);
        be->free(be, s->dev_y[i]);
        s->dev->event_free(be, s->copied[i]);
        s->dev->event_free(be, s->consumed[i]);
    }
    free(s);
}

staging *staging_create(backend_t *be, size_t x_bytes, size_t y_bytes, tt_err *err)
{
    staging *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of host memory");
        return NULL;
    }
    const backend_device_ops *dev = be->dev;
    s->be = be;
    s->dev = dev;
    s->x_bytes = x_bytes;
    s->y_bytes = y_bytes;
    s->current = -1;
    staging_ring_init(&s->ring);
    if ((s->copy = dev->queue_create(be, err)) == NULL)
        goto fail;
    for (int i = 0; i < 2; i++) {
        if ((s->host_x[i] = dev->host_alloc(be, x_bytes, err)) == NULL ||
            (s->host_y[i] = dev->host_alloc(be, y_bytes, err)) == NULL ||
            (s->copied[i] = dev->event_create(be, false, err)) == NULL ||
            (s->consumed[i] = dev->event_create(be, false, err)) == NULL)
            goto fail;
        s->dev_x[i] = be->alloc(be, x_bytes);
        s->dev_y[i] = be->alloc(be, y_bytes);
        if (s->dev_x[i] == NULL || s->dev_y[i] == NULL) {
            err_set(err, TT_ERR_USAGE, "%s:%d: staging buffers: %s", dev->kind, be->device,
                    dev->alloc_error(be));
            goto fail;
        }
    }
    return s;
fail:
    staging_free(s);
    return NULL;
}

int staging_load(staging *s, int64_t step, const float *x, size_t x_bytes, const int32_t *y,
                 size_t y_bytes, float **dev_x, int32_t **dev_y, tt_err *err)
{
    backend_t *be = s->be;
    const backend_device_ops *dev = s->dev;
    if (x_bytes > s->x_bytes || y_bytes > s->y_bytes)
        return err_set(err, TT_ERR_RUNTIME, "%s:%d: a batch larger than the staging buffers",
                       dev->kind, be->device);
    bool host_wait, copy_wait;
    int slot = staging_ring_fill(&s->ring, step, &host_wait, &copy_wait);
    if (slot < 0)
        return err_set(err, TT_ERR_RUNTIME, "%s:%d: staging: no free slot for step %lld",
                       dev->kind, be->device, (long long)step);
    /* the copy of this slot's previous batch must be done before the host
     * writes its pinned buffer (long done: it was two steps ago); polled,
     * as the copy queue waits on compute events that wait on the all-reduce */
    if (host_wait && backend_device_wait_event(be, s->copied[slot], "staging", err) != 0)
        return -1;
    if (dev->step != NULL)
        dev->step(be, step);
    memcpy(s->host_x[slot], x, x_bytes);
    memcpy(s->host_y[slot], y, y_bytes);
    /* the step that last read this slot's device buffer must be past it */
    if ((copy_wait && dev->queue_wait_event(be, s->copy, s->consumed[slot], err) != 0) ||
        dev->copy_h2d_async(be, s->dev_x[slot], s->host_x[slot], x_bytes, s->copy, err) != 0 ||
        dev->copy_h2d_async(be, s->dev_y[slot], s->host_y[slot], y_bytes, s->copy, err) != 0 ||
        dev->event_record(be, s->copied[slot], s->copy, err) != 0)
        return -1;
    int taken = staging_ring_take(&s->ring, step);
    if (taken != slot)
        return err_set(err, TT_ERR_RUNTIME, "%s:%d: staging: step %lld not loaded", dev->kind,
                       be->device, (long long)step);
    /* the step reads the slot after its copy: the compute queue waits */
    if (dev->queue_wait_event(be, dev->queue(be), s->copied[slot], err) != 0)
        return -1;
    s->current = slot;
    *dev_x = s->dev_x[slot];
    *dev_y = s->dev_y[slot];
    return 0;
}

int staging_done(staging *s, tt_err *err)
{
    if (s->current < 0)
        return 0;
    backend_t *be = s->be;
    if (s->dev->event_record(be, s->consumed[s->current], s->dev->queue(be), err) != 0)
        return -1;
    staging_ring_release(&s->ring, s->current);
    s->current = -1;
    return 0;
}
