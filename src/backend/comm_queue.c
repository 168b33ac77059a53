/* comm_queue.c - a device all-reduce's ordering against a tower's compute
 * queue (backend.h, backend_comm_queue): the host logic NCCL's
 * communicator (cuda_device.c) and sim's (sim_comm.c) share, on backend.h's
 * queues and events, so make check runs the ordering a GPU tower's
 * all-reduce relies on. */
#include "backend/backend.h"

int backend_comm_queue_create(backend_t *be, backend_comm_queue *cq, tt_err *err)
{
    const backend_device_ops *dev = be->dev;
    *cq = (backend_comm_queue){0};
    if ((cq->q = dev->queue_create(be, err)) == NULL ||
        (cq->ready = dev->event_create(be, false, err)) == NULL ||
        (cq->done = dev->event_create(be, false, err)) == NULL) {
        backend_comm_queue_free(be, cq);
        return -1;
    }
    return 0;
}

int backend_comm_queue_start(backend_t *be, backend_comm_queue *cq, tt_err *err)
{
    const backend_device_ops *dev = be->dev;
    backend_event *mark = cq->start_mark;
    cq->start_mark = NULL;
    return dev->event_record(be, cq->ready, dev->queue(be), err) != 0 ||
                   dev->queue_wait_event(be, cq->q, cq->ready, err) != 0 ||
                   (mark != NULL && dev->event_record(be, mark, cq->q, err) != 0)
               ? -1
               : 0;
}

int backend_comm_queue_record(backend_t *be, backend_comm_queue *cq, backend_event *e,
                              bool at_start, tt_err *err)
{
    if (at_start) { /* a timing event costs nothing until recorded: kept for start */
        cq->start_mark = e;
        return 0;
    }
    return be->dev->event_record(be, e, cq->q, err);
}

int backend_comm_queue_join(backend_t *be, backend_comm_queue *cq, tt_err *err)
{
    const backend_device_ops *dev = be->dev;
    return dev->event_record(be, cq->done, cq->q, err) != 0 ||
                   dev->queue_wait_event(be, dev->queue(be), cq->done, err) != 0
               ? -1
               : 0;
}

void backend_comm_queue_free(backend_t *be, backend_comm_queue *cq)
{
    const backend_device_ops *dev = be->dev;
    dev->queue_free(be, cq->q); /* polls; a stalled collective is aborted */
    dev->event_free(be, cq->ready);
    dev->event_free(be, cq->done);
    *cq = (backend_comm_queue){0};
}
