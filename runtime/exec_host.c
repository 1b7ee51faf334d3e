/* The turn of the workers of one host (runtime/exec_host.h). */
#include "protocol/clock.h"
#include "runtime/exec_host.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* How often a waiting worker looks at the stop flag, which nobody signals. */
#define PT_EXEC_HOST_POLL_MS 20

struct pt_exec_host {
    const pt_program *prog;
    int host;
    int next;    /* position in the host's order of the op whose turn it is */
    int aborted; /* a worker failed */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

int pt_exec_host_new(const pt_program *prog, int host, pt_exec_host **out, pt_error *err)
{
    *out = NULL;
    if (!prog || prog->host_count <= 0 || host < 0 || host >= prog->host_count)
        return pt_error_set(err, PT_EINVAL, "host turn: program has no host %d", host);
    pt_exec_host *h = calloc(1, sizeof *h);
    if (!h)
        return pt_error_set(err, PT_ENOMEM, "host turn: out of memory");
    h->prog = prog;
    h->host = host;
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = h;
    return 0;
}

void pt_exec_host_free(pt_exec_host **h_p)
{
    if (!h_p || !*h_p)
        return;
    pthread_cond_destroy(&(*h_p)->cv);
    pthread_mutex_destroy(&(*h_p)->mu);
    free(*h_p);
    *h_p = NULL;
}

void pt_exec_host_rewind(pt_exec_host *h)
{
    pthread_mutex_lock(&h->mu);
    h->next = 0;
    h->aborted = 0;
    pthread_mutex_unlock(&h->mu);
}

int pt_exec_host_take(pt_exec_host *h, int op_index, const atomic_int *stop, pt_error *err)
{
    const pt_program *p = h->prog;
    int len = pt_sched_host_len(p, h->host), rc = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        if (h->aborted || (stop && atomic_load(stop))) {
            rc = pt_error_set(err, PT_ESTATE,
                              "host %d: stopped (another chunk of the device "
                              "failed or the run was stopped)",
                              h->host);
            break;
        }
        if (h->next >= len) {
            rc = pt_error_set(err, PT_EINVAL, "host %d: op %d is not in its order", h->host,
                              op_index);
            break;
        }
        if (pt_sched_host_op(p, h->host, h->next) == op_index)
            break;
        struct timespec t = pt_clock_deadline(CLOCK_MONOTONIC, PT_EXEC_HOST_POLL_MS);
        pthread_cond_timedwait(&h->cv, &h->mu, &t);
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void pt_exec_host_give(pt_exec_host *h)
{
    pthread_mutex_lock(&h->mu);
    h->next++;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void pt_exec_host_abort(pt_exec_host *h)
{
    pthread_mutex_lock(&h->mu);
    h->aborted = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}
