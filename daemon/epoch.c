/*
 * epoch.c - the ring's epoch rules; see epoch.h.
 */
#include "epoch.h"

void epochs_init(epochs *e, int n, int me)
{
    e->n = n;
    e->me = me;
    e->epoch = 1;
    e->phase = RING_BROKEN;
}

uint32_t epochs_next(const epochs *e)
{
    uint32_t n = (uint32_t)e->n, x = e->epoch - e->epoch % n + (uint32_t)e->me;
    return x > e->epoch ? x : x + n;
}

uint32_t epochs_start(epochs *e, ring_phase phase)
{
    e->epoch = epochs_next(e);
    e->phase = phase;
    return e->epoch;
}

epoch_action epochs_receive(epochs *e, const frame_epoch *f)
{
    int mine = f->origin == (uint32_t)e->me;
    if (f->epoch > e->epoch && !mine) {
        if (f->phase == EPOCH_BREAK) {
            e->epoch = f->epoch;
            e->phase = RING_BROKEN;
            return EPOCH_BROKE;
        }
        if (f->phase == EPOCH_FORM) {
            e->epoch = f->epoch;
            e->phase = RING_FORMING;
            return EPOCH_REFORMING;
        }
        return EPOCH_DROP; /* a CONFIRM of an epoch never proposed here */
    }
    if (f->epoch != e->epoch) return EPOCH_DROP;
    /* Our proposal came back: every link carried it. */
    if (f->phase == EPOCH_FORM && mine) return EPOCH_CAME_ROUND;
    if (f->phase == EPOCH_CONFIRM && !mine) return EPOCH_CONFIRMED;
    return EPOCH_DROP;
}

void epochs_confirm(epochs *e)
{
    e->phase = RING_READY;
}

void epochs_raise(epochs *e, uint32_t x)
{
    if (x > e->epoch) e->epoch = x;
}

int epochs_current(const epochs *e, uint32_t x)
{
    return x == e->epoch;
}

int epochs_ready(const epochs *e)
{
    return e->phase == RING_READY;
}
