/* In-process pipeline: one thread per worker of a schedule program. See
 * runtime/pipeline.h. */
#include "runtime/pipeline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "runtime/exec_host.h"
#include "runtime/stage.h"

typedef struct worker {
    pt_pipeline *pp;
    int w;
    const pt_backend *be; /* NULL: the default backend */
    int owns_be;
    pt_stage_replica *st; /* net, optimizer, feed and (once wired) executor */
    pt_comm *comm;
    pt_collective *coll;
    pthread_t thread;
    int64_t base;
    int rc;
    pt_error err;
    pt_exec_result res;
} worker;

struct pt_pipeline {
    const pt_program *prog;
    int nw;
    worker *wk;
    void *zctx;
    atomic_int stop;
    pthread_mutex_t mu;
    int first_rc; /* first failure that is not a consequence of another */
    pt_error first_err;
    int host_rc; /* a chunk stopped by its host's abort: reported only without a cause */
    pt_error host_err;
    pt_exec_host **hosts;   /* [prog->host_count]: the turns of interleaved devices */
    const int *ranks;       /* host_comm: every worker's rank, its host (prog->worker_host) */
    int own_comm;           /* 0: the workers' comm pointers are borrowed from host_comm_of */
    pt_comm **host_comm_of; /* host_comm: [prog->host_count], owned: one rank per device */
    char (*ipc_paths)[PT_COMM_ENDPOINT_MAX]; /* ipc socket files to remove, [2 * nw] */
    int ipc_count;
};

static unsigned next_pipeline_id(void)
{
    static atomic_uint counter;
    return atomic_fetch_add(&counter, 1);
}

static void endpoint_for(const pt_pipeline_config *cfg, unsigned id, const char *what, int w,
                         char *buf, size_t size)
{
    switch (cfg->transport) {
    case PT_TRANSPORT_IPC:
        snprintf(buf, size, "ipc:///tmp/pt-pipe-%ld-%u-%s%d", (long)getpid(), id, what, w);
        break;
    case PT_TRANSPORT_TCP:
        snprintf(buf, size, "tcp://127.0.0.1:*");
        break;
    default:
        snprintf(buf, size, "inproc://pt-pipe-%u-%s%d", id, what, w);
        break;
    }
}

/* Creates and connects one communicator per worker in `use` (others NULL):
 * worker w's has rank ranks[w] (NULL: w) of `size` and connects to the
 * others of its group (group NULL: all). */
static int make_comms(pt_pipeline *pp, const pt_pipeline_config *cfg, const char *what,
                      const int *use, pt_comm **comms, const int *ranks, int size, const int *group,
                      pt_error *err)
{
    unsigned id = next_pipeline_id();
    const char **eps = calloc((size_t)size, sizeof *eps);
    if (!eps)
        return pt_error_set(err, PT_ENOMEM, "pipeline: out of memory");
    int rc = 0;
    for (int w = 0; w < pp->nw && rc == 0; w++) {
        if (!use[w])
            continue;
        char ep[PT_COMM_ENDPOINT_MAX];
        endpoint_for(cfg, id, what, w, ep, sizeof ep);
        pt_comm_config cc = {.rank = ranks ? ranks[w] : w,
                             .size = size,
                             .bind_endpoint = ep,
                             .zmq_context = pp->zctx,
                             .shm_ring_bytes = cfg->shm_ring_bytes,
                             .timeout_ms =
                                 cfg->timeout_ms > 0 ? cfg->timeout_ms : PT_PIPELINE_TIMEOUT_MS};
        rc = pt_comm_create(&cc, &comms[w], err);
        if (rc == 0 && cfg->transport == PT_TRANSPORT_IPC && pp->ipc_paths)
            snprintf(pp->ipc_paths[pp->ipc_count++], PT_COMM_ENDPOINT_MAX, "%s",
                     ep + strlen("ipc://"));
    }
    for (int w = 0; w < pp->nw && rc == 0; w++) {
        if (!use[w])
            continue;
        memset(eps, 0, (size_t)size * sizeof *eps);
        for (int k = 0; k < pp->nw; k++)
            if (use[k] && (!group || group[k] == group[w]))
                eps[ranks ? ranks[k] : k] = pt_comm_endpoint(comms[k]);
        rc = pt_comm_connect(comms[w], eps, err);
    }
    free(eps);
    return rc;
}

/* The worker's stage (net, optimizer, feed) on its backend: the one it is
 * given, or its own on cfg->device. */
static int make_worker(const pt_pipeline *pp, const pt_pipeline_config *cfg, worker *k,
                       pt_error *err)
{
    if (cfg->backend) {
        k->be = cfg->backend;
    } else if (cfg->device) {
        int rc = pt_device_open(cfg->device, &k->be, err);
        if (rc < 0)
            return rc;
        k->owns_be = 1;
    }
    pt_stage_config sc = {.prog = pp->prog,
                          .worker = k->w,
                          .spec = cfg->spec,
                          .optim = &cfg->optim,
                          .backend = k->be,
                          .init_seed = cfg->init_seed,
                          .data = cfg->data,
                          .data_seed = cfg->data_seed};
    return pt_stage_create(&sc, &k->st, err);
}

static int make_exec(pt_pipeline *pp, const pt_pipeline_config *cfg, worker *k, pt_error *err)
{
    pt_stage_links links = {.comm = k->comm,
                            .coll = k->coll,
                            .ranks = pp->ranks,
                            .host = pp->hosts ? pp->hosts[pp->prog->worker_host[k->w]] : NULL,
                            .on_op = cfg->on_op,
                            .user = cfg->user,
                            .stop = &pp->stop,
                            .digest = cfg->digest};
    return pt_stage_wire(k->st, &links, err);
}

int pt_pipeline_create(const pt_pipeline_config *cfg, pt_pipeline **out, pt_error *err)
{
    *out = NULL;
    if (!cfg || !cfg->spec || !cfg->prog || cfg->prog->worker_count < 1)
        return pt_error_set(err, PT_EINVAL, "pipeline: a model spec and a program are required");
    pt_pipeline *pp = calloc(1, sizeof *pp);
    if (!pp)
        return pt_error_set(err, PT_ENOMEM, "pipeline: out of memory");
    pp->prog = cfg->prog;
    pp->nw = cfg->prog->worker_count;
    pthread_mutex_init(&pp->mu, NULL);
    pp->wk = calloc((size_t)pp->nw, sizeof(worker));
    if (cfg->transport == PT_TRANSPORT_IPC)
        pp->ipc_paths = calloc((size_t)pp->nw * 2, sizeof *pp->ipc_paths);
    int *use = calloc((size_t)pp->nw * 2, sizeof(int));
    pt_comm **comms = calloc((size_t)pp->nw * 2, sizeof(pt_comm *));
    int rc = 0;
    if (!pp->wk || !use || !comms || (cfg->transport == PT_TRANSPORT_IPC && !pp->ipc_paths)) {
        rc = pt_error_set(err, PT_ENOMEM, "pipeline: out of memory");
        goto done;
    }
    if (!(pp->zctx = zmq_ctx_new())) {
        rc = pt_error_set(err, PT_EIO, "pipeline: no ZeroMQ context");
        goto done;
    }
    int any_comm = 0;
    for (int w = 0; w < pp->nw && rc == 0; w++) {
        pp->wk[w].pp = pp;
        pp->wk[w].w = w;
        rc = make_worker(pp, cfg, &pp->wk[w], err);
        if (rc < 0)
            break;
        const pt_exec_needs *n = pt_stage_needs(pp->wk[w].st);
        use[w] = pp->nw > 1;
        any_comm |= n->needs_comm;
        use[pp->nw + w] = n->needs_collective;
    }
    const pt_program *p = pp->prog;
    int hc = cfg->host_comm && p->host_count > 0, H = p->host_count;
    pp->own_comm = !hc;
    if (rc == 0 && hc) {
        /* one rank per device: the communicator of a host's first worker serves its
         * chunks; each chunk's collective (rank = host) talks to that chunk's peers */
        pp->ranks = p->worker_host;
        int *chunk = calloc((size_t)pp->nw, sizeof *chunk);
        pp->host_comm_of = calloc((size_t)H, sizeof *pp->host_comm_of);
        if (!chunk || !pp->host_comm_of)
            rc = pt_error_set(err, PT_ENOMEM, "pipeline: out of memory");
        for (int w = 0; w < pp->nw && rc == 0; w++) {
            chunk[w] = pt_exec_host_chunk(p, w);
            use[w] = any_comm && H > 1;
            for (int k = 0; k < w; k++)
                use[w] &= p->worker_host[k] != p->worker_host[w];
        }
        if (rc == 0)
            rc = make_comms(pp, cfg, "w", use, comms, pp->ranks, H, NULL, err);
        if (rc == 0)
            rc = make_comms(pp, cfg, "c", use + pp->nw, comms + pp->nw, pp->ranks, H, chunk, err);
        for (int w = 0; w < pp->nw && pp->host_comm_of; w++)
            if (comms[w])
                pp->host_comm_of[p->worker_host[w]] = comms[w];
        for (int w = 0; w < pp->nw && pp->host_comm_of; w++)
            comms[w] = pp->host_comm_of[p->worker_host[w]];
        free(chunk);
    } else {
        if (rc == 0 && any_comm)
            rc = make_comms(pp, cfg, "w", use, comms, NULL, pp->nw, NULL, err);
        if (rc == 0)
            rc = make_comms(pp, cfg, "c", use + pp->nw, comms + pp->nw, NULL, pp->nw, NULL, err);
    }
    for (int w = 0; w < pp->nw; w++) {
        pp->wk[w].comm = comms[w];
        if (comms[pp->nw + w] && rc == 0) {
            rc = pt_collective_create(&comms[pp->nw + w], &pp->wk[w].coll, err);
            if (rc < 0)
                pt_comm_destroy(&comms[pp->nw + w]);
        } else {
            pt_comm_destroy(&comms[pp->nw + w]);
        }
    }
    if (rc == 0 && pp->prog->host_count > 0) {
        pp->hosts = calloc((size_t)pp->prog->host_count, sizeof *pp->hosts);
        if (!pp->hosts)
            rc = pt_error_set(err, PT_ENOMEM, "pipeline: out of memory");
        for (int h = 0; h < pp->prog->host_count && rc == 0; h++)
            rc = pt_exec_host_new(pp->prog, h, &pp->hosts[h], err);
    }
    for (int w = 0; w < pp->nw && rc == 0; w++)
        rc = make_exec(pp, cfg, &pp->wk[w], err);
done:
    free(use);
    free(comms);
    if (rc < 0) {
        pt_pipeline_destroy(&pp);
        return rc;
    }
    *out = pp;
    return 0;
}

void pt_pipeline_destroy(pt_pipeline **pp_p)
{
    if (!pp_p || !*pp_p)
        return;
    pt_pipeline *pp = *pp_p;
    for (int w = 0; pp->wk && w < pp->nw; w++) {
        worker *k = &pp->wk[w];
        pt_stage_unwire(k->st); /* before the communicators it sent from */
        pt_collective_destroy(&k->coll);
        if (pp->own_comm)
            pt_comm_destroy(&k->comm);
        pt_stage_destroy(&k->st);
        if (k->owns_be)
            pt_device_close(&k->be);
    }
    for (int h = 0; pp->hosts && h < pp->prog->host_count; h++)
        pt_exec_host_free(&pp->hosts[h]);
    free(pp->hosts);
    for (int h = 0; pp->host_comm_of && h < pp->prog->host_count; h++)
        pt_comm_destroy(&pp->host_comm_of[h]);
    free(pp->host_comm_of);
    if (pp->zctx)
        zmq_ctx_term(pp->zctx);
    /* ZeroMQ leaves the files of ipc sockets behind */
    for (int k = 0; k < pp->ipc_count; k++)
        unlink(pp->ipc_paths[k]);
    free(pp->ipc_paths);
    pthread_mutex_destroy(&pp->mu);
    free(pp->wk);
    free(pp);
    *pp_p = NULL;
}

static void *run_worker(void *arg)
{
    worker *k = arg;
    pt_pipeline *pp = k->pp;
    k->err.code = 0;
    k->rc = pt_backend_cuda_bind(k->be);
    if (k->rc < 0)
        pt_error_set(&k->err, k->rc, "pipeline: worker %d: cannot select its GPU", k->w);
    else
        k->rc = pt_exec_run(pt_stage_exec(k->st), k->base, &k->res, &k->err);
    if (k->rc < 0) {
        /* the first failure is the cause; others stop or time out because of it */
        pthread_mutex_lock(&pp->mu);
        if (k->rc == PT_ESTATE && pp->hosts && !atomic_load(&pp->stop)) {
            /* most likely another chunk of its device failed and aborted the host:
             * that chunk reports the cause */
            if (pp->host_rc == 0) {
                pp->host_rc = k->rc;
                pp->host_err = k->err;
            }
        } else {
            if (pp->first_rc == 0 && !atomic_load(&pp->stop)) {
                pp->first_rc = k->rc;
                pp->first_err = k->err;
            }
            atomic_store(&pp->stop, 1);
        }
        pthread_mutex_unlock(&pp->mu);
    }
    return NULL;
}

int pt_pipeline_run(pt_pipeline *pp, int64_t iteration_base, pt_error *err)
{
    if (!pp)
        return pt_error_set(err, PT_EINVAL, "pipeline: NULL argument");
    atomic_store(&pp->stop, 0);
    pp->first_rc = 0;
    pp->host_rc = 0;
    for (int h = 0; pp->hosts && h < pp->prog->host_count; h++)
        pt_exec_host_rewind(pp->hosts[h]);
    int started = 0, rc = 0;
    for (int w = 0; w < pp->nw; w++) {
        pp->wk[w].base = iteration_base;
        pp->wk[w].rc = 0;
        if (pthread_create(&pp->wk[w].thread, NULL, run_worker, &pp->wk[w]) != 0) {
            atomic_store(&pp->stop, 1);
            rc = pt_error_set(err, PT_ENOMEM, "pipeline: cannot start the thread of worker %d", w);
            break;
        }
        started++;
    }
    for (int w = 0; w < started; w++)
        pthread_join(pp->wk[w].thread, NULL);
    if (pp->first_rc == 0 && pp->host_rc < 0) {
        pp->first_rc = pp->host_rc;
        pp->first_err = pp->host_err;
    }
    if (rc == 0 && pp->first_rc < 0) {
        rc = pp->first_rc;
        if (err)
            *err = pp->first_err;
    }
    if (rc < 0)
        for (int w = 0; w < pp->nw; w++)
            pt_exec_reset(pt_stage_exec(pp->wk[w].st));
    return rc;
}

double pt_pipeline_window_loss(const pt_pipeline *pp, int wdw)
{
    double sum = 0;
    int64_t count = 0;
    for (int w = 0; pp && w < pp->nw; w++) {
        double s;
        int64_t c;
        pt_exec_window_loss(pt_stage_exec(pp->wk[w].st), wdw, &s, &c);
        sum += s;
        count += c;
    }
    return count > 0 ? sum / (double)count : 0;
}

int pt_pipeline_worker_count(const pt_pipeline *pp)
{
    return pp ? pp->nw : 0;
}

pt_net *pt_pipeline_net(pt_pipeline *pp, int w)
{
    return pp && w >= 0 && w < pp->nw ? pt_stage_net(pp->wk[w].st) : NULL;
}

pt_optim *pt_pipeline_optim(pt_pipeline *pp, int w)
{
    return pp && w >= 0 && w < pp->nw ? pt_stage_optim(pp->wk[w].st) : NULL;
}

pt_exec *pt_pipeline_exec(pt_pipeline *pp, int w)
{
    return pp && w >= 0 && w < pp->nw ? pt_stage_exec(pp->wk[w].st) : NULL;
}

pt_exec_result pt_pipeline_result(const pt_pipeline *pp, int w)
{
    pt_exec_result r;
    memset(&r, 0, sizeof r);
    return pp && w >= 0 && w < pp->nw ? pp->wk[w].res : r;
}

int pt_pipeline_get_layer(pt_pipeline *pp, int layer, int replica, float *host, int64_t count)
{
    if (!pp)
        return PT_EINVAL;
    const pt_program *p = pp->prog;
    for (int s = 0; s < p->stage_count; s++) {
        int w0 = p->stage_worker[s];
        if (layer < p->workers[w0].first || layer >= p->workers[w0].last)
            continue;
        if (replica < 0 || replica >= p->stage_worker[s + 1] - w0)
            return PT_ERANGE;
        return pt_net_get_layer(pt_stage_net(pp->wk[w0 + replica].st), layer, NULL, host, count);
    }
    return PT_ERANGE;
}
