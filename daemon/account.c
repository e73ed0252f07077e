/*
 * account.c - where each local rank's time goes; see account.h.
 */
#include "account.h"

#include <stdlib.h>
#include <string.h>

#include "ringd.h"

#define SEC 1000000000ull

typedef enum { COMPUTE, WAIT, TRANSFER, FAILURE } kind_e;

int account_init(account *a, int n)
{
    memset(a, 0, sizeof *a);
    a->ranks = calloc((size_t)n, sizeof *a->ranks);
    if (!a->ranks) return RINGD_ENOMEM;
    a->n = n;
    return 0;
}

void account_free(account *a)
{
    free(a->ranks);
    a->ranks = NULL;
    a->n = 0;
}

static void add_kind(account_times *t, kind_e k, uint64_t ns)
{
    switch (k) {
    case COMPUTE:
        t->compute += ns;
        break;
    case WAIT:
        t->wait += ns;
        break;
    case TRANSFER:
        t->transfer += ns;
        break;
    case FAILURE:
        t->failure += ns;
        break;
    }
}

/* The bucket of second b (b + 1 stored: 0 marks an empty one). */
static account_times *bucket(account_rank *r, uint64_t b)
{
    int i = (int)(b % ACCOUNT_BUCKETS);
    if (r->bucket_id[i] != b + 1) {
        memset(&r->bucket[i], 0, sizeof r->bucket[i]);
        r->bucket_id[i] = b + 1;
    }
    return &r->bucket[i];
}

/* Adds [t0, t1) to kind k: to the job, the totals, and the buckets of the
 * seconds it covers (only the last ACCOUNT_BUCKETS can matter). */
static void add(account_rank *r, kind_e k, uint64_t t0, uint64_t t1)
{
    if (t1 <= t0) return;
    add_kind(&r->life, k, t1 - t0);
    add_kind(&r->total, k, t1 - t0);
    uint64_t keep = (uint64_t)ACCOUNT_BUCKETS * SEC;
    if (t1 > keep && t0 < t1 - keep) t0 = t1 - keep;
    while (t0 < t1) {
        uint64_t b = t0 / SEC, end = (b + 1) * SEC < t1 ? (b + 1) * SEC : t1;
        add_kind(bucket(r, b), k, end - t0);
        t0 = end;
    }
}

/* Counts an ended call in the job, the totals and now's bucket. */
static void count_call(account_rank *r, uint64_t now, int failed, uint64_t bytes)
{
    account_times *ts[3] = {&r->life, &r->total, bucket(r, now / SEC)};
    for (int i = 0; i < 3; i++) {
        ts[i]->calls++;
        if (failed)
            ts[i]->failed++;
        else
            ts[i]->bytes += bytes;
    }
}

/* Until when a rank that left failing is still recovering, at now. */
static uint64_t recovering_until(const account *a, uint64_t now)
{
    uint64_t limit = a->left_ns + ACCOUNT_RECOVER_NS;
    return now < limit ? now : limit;
}

/* What a rank does between events: computes, fails, or neither (it has no
 * process, and nothing failed). */
static int idle_kind(const account_rank *r, kind_e *k)
{
    if (r->failing) {
        *k = FAILURE;
        return 1;
    }
    *k = COMPUTE;
    return r->connected;
}

/* Ends the open interval of r at now, if its process was computing or it
 * was failing. */
static void close_idle(const account *a, account_rank *r, uint64_t now)
{
    kind_e k;
    if (idle_kind(r, &k)) add(r, k, r->mark, r->connected ? now : recovering_until(a, now));
    r->mark = now;
}

static int any_connected(const account *a)
{
    for (int i = 0; i < a->n; i++)
        if (a->ranks[i].connected) return 1;
    return 0;
}

static int any_failing(const account *a)
{
    for (int i = 0; i < a->n; i++)
        if (a->ranks[i].failing) return 1;
    return 0;
}

static void new_job(account *a, uint64_t now)
{
    for (int i = 0; i < a->n; i++) {
        account_rank *r = &a->ranks[i];
        close_idle(a, r, now); /* the last job's totals end here */
        memset(&r->life, 0, sizeof r->life);
        memset(r->bucket, 0, sizeof r->bucket);
        memset(r->bucket_id, 0, sizeof r->bucket_id);
        r->late_ns = r->late_calls = 0;
        r->n_spans = 0;
        r->failing = 0;
        r->ever = 0;
        r->pid = 0;
    }
    a->job_ns = now;
    a->jobs++;
}

int account_connect(account *a, int lr, uint64_t now, uint32_t pid, int recovering)
{
    int begun = 0;
    account_rank *r = &a->ranks[lr];
    if (!any_connected(a)) {
        if (!a->job_ns || !(any_failing(a) || recovering) ||
            now - a->left_ns > ACCOUNT_RECOVER_NS) {
            new_job(a, now);
            begun = 1;
        } else if (recovering && r->ever && !r->failing) {
            /* Its last process left between calls, and the others fail for
             * want of it: it was lost, and this one takes its place. */
            r->failing = 1;
        }
    }
    close_idle(a, r, now); /* a restart's gap is failure */
    r->connected = 1;
    r->outstanding = 0;
    r->pid = pid;
    r->ever = 1;
    r->mark = now;
    return begun;
}

void account_disconnect(account *a, int lr, uint64_t now)
{
    account_rank *r = &a->ranks[lr];
    if (!r->connected) return;
    if (r->outstanding > 0) {
        /* It died in a call: its calls failed, and the job is recovering. */
        add(r, FAILURE, r->mark, now);
        for (int i = 0; i < r->outstanding; i++)
            count_call(r, now, 1, 0);
        r->spans[r->n_spans++ % ACCOUNT_SPANS] =
            (account_span){.start = r->mark,
                           .dur = now > r->mark ? now - r->mark : 0,
                           .kind = r->kind,
                           .failed = 1};
        r->failing = 1;
        r->mark = now;
    } else {
        close_idle(a, r, now);
    }
    r->connected = 0;
    r->outstanding = 0;
    a->left_ns = now;
}

void account_submit(account *a, int lr, uint64_t now, uint8_t kind)
{
    account_rank *r = &a->ranks[lr];
    if (r->outstanding++ > 0) return;
    close_idle(a, r, now);
    r->kind = kind;
}

void account_result(account *a, int lr, uint64_t now, const account_call *c)
{
    account_rank *r = &a->ranks[lr];
    if (r->outstanding == 0) return; /* cannot be: every result answers a submission */
    r->outstanding--;
    uint64_t start = r->mark, dur = now > start ? now - start : 0, wait = 0;
    if (c->status < 0) {
        add(r, FAILURE, start, now);
        r->failing = 1;
    } else {
        if (c->last_ns > start) wait = c->last_ns - start < dur ? c->last_ns - start : dur;
        add(r, WAIT, start, start + wait);
        add(r, TRANSFER, start + wait, now);
        r->failing = 0;
        if (c->late_ns >= ACCOUNT_LATE_NS) {
            r->late_ns += c->late_ns;
            r->late_calls++;
        }
    }
    count_call(r, now, c->status < 0, c->bytes);
    r->spans[r->n_spans++ % ACCOUNT_SPANS] = (account_span){
        .start = start, .dur = dur, .wait = wait, .kind = c->kind, .failed = c->status < 0};
    r->mark = now > start ? now : start;
}

static void sum_into(account_times *to, const account_times *t)
{
    to->compute += t->compute;
    to->wait += t->wait;
    to->transfer += t->transfer;
    to->failure += t->failure;
    to->calls += t->calls;
    to->failed += t->failed;
    to->bytes += t->bytes;
}

void account_read(const account *a, int lr, uint64_t now, account_view *out)
{
    const account_rank *r = &a->ranks[lr];
    memset(out, 0, sizeof *out);
    out->life = r->life;
    out->total = r->total;
    out->late_ns = r->late_ns;
    out->late_calls = r->late_calls;
    out->connected = r->connected;
    out->failing = r->failing;
    out->ever = r->ever;
    out->pid = r->pid;
    /* The window: the buckets of its last whole seconds and of this one. */
    uint64_t nb = now / SEC, from = nb >= ACCOUNT_WINDOW_S ? nb - ACCOUNT_WINDOW_S : 0;
    for (int i = 0; i < ACCOUNT_BUCKETS; i++) {
        uint64_t id = r->bucket_id[i];
        if (id && id - 1 >= from && id - 1 <= nb) sum_into(&out->window, &r->bucket[i]);
    }
    /* The interval still open, if it is computing or failing. */
    kind_e k;
    if (r->outstanding == 0 && idle_kind(r, &k)) {
        uint64_t end = r->connected ? now : recovering_until(a, now);
        if (end > r->mark) {
            add_kind(&out->life, k, end - r->mark);
            add_kind(&out->total, k, end - r->mark);
            uint64_t w0 = from * SEC > r->mark ? from * SEC : r->mark;
            if (end > w0) add_kind(&out->window, k, end - w0);
        }
    }
    uint64_t n = r->n_spans < ACCOUNT_SPANS ? r->n_spans : ACCOUNT_SPANS;
    for (uint64_t i = 0; i < n; i++)
        out->spans[i] = r->spans[(r->n_spans - n + i) % ACCOUNT_SPANS];
    out->n_spans = (int)n;
}
