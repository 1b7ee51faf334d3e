/* One worker of a schedule program, assembled. See runtime/stage.h. */
#include "runtime/stage.h"

#include <stdlib.h>

#include "runtime/feed.h"

struct pt_stage_replica {
    const pt_program *prog;
    int worker;
    pt_exec_needs needs;
    pt_net *net;
    pt_optim *optim;
    pt_feed *feed;
    pt_exec *exec;
};

int pt_stage_needs_data(const pt_program *prog, int worker, pt_error *err)
{
    pt_exec_needs n;
    int rc = pt_exec_needs_of(prog, worker, &n, err);
    return rc < 0 ? rc : n.needs_input || n.needs_labels;
}

static int make_parts(pt_stage_replica *st, const pt_stage_config *cfg, pt_error *err)
{
    const pt_exec_needs *n = &st->needs;
    pt_net_config nc = pt_net_config_default(cfg->spec);
    nc.first = n->first;
    nc.last = n->last;
    nc.max_batch = n->max_batch > 0 ? n->max_batch : 1;
    nc.max_slots = n->max_slots > 0 ? n->max_slots : 1;
    nc.recompute = n->recompute;
    nc.seed = cfg->init_seed;
    nc.backend = cfg->backend;
    int rc = pt_net_create(cfg->spec, &nc, &st->net, err);
    if (rc == 0)
        rc = pt_optim_create(cfg->optim, pt_net_arena(st->net), pt_net_param_count(st->net),
                             &st->optim, err);
    if (rc < 0 || !(n->needs_input || n->needs_labels))
        return rc;
    if (!cfg->data)
        return pt_error_set(err, PT_EINVAL, "stage %d replica %d: needs a data set", n->stage,
                            n->replica);
    return pt_feed_create(cfg->data, cfg->data_seed, cfg->prog->mb_size, cfg->prog->mb_per_window,
                          &st->feed, err);
}

int pt_stage_create(const pt_stage_config *cfg, pt_stage_replica **out, pt_error *err)
{
    *out = NULL;
    if (!cfg || !cfg->prog || !cfg->spec || !cfg->optim)
        return pt_error_set(err, PT_EINVAL, "stage: a program, a model spec and an optimizer");
    pt_stage_replica *st = calloc(1, sizeof *st);
    if (!st)
        return pt_error_set(err, PT_ENOMEM, "stage: out of memory");
    st->prog = cfg->prog;
    st->worker = cfg->worker;
    int rc = pt_exec_needs_of(cfg->prog, cfg->worker, &st->needs, err);
    if (rc == 0)
        rc = make_parts(st, cfg, err);
    if (rc < 0) {
        pt_stage_destroy(&st);
        return rc;
    }
    *out = st;
    return 0;
}

int pt_stage_wire(pt_stage_replica *st, const pt_stage_links *l, pt_error *err)
{
    if (st->exec)
        return pt_error_set(err, PT_ESTATE, "stage: already wired");
    pt_exec_config ec = {.prog = st->prog,
                         .worker = st->worker,
                         .net = st->net,
                         .optim = st->optim,
                         .comm = l->comm,
                         .coll = l->coll,
                         .ranks = l->ranks,
                         .on_op = l->on_op,
                         .user = l->user,
                         .stop = l->stop,
                         .digest = l->digest,
                         .nccl = l->nccl,
                         .nccl_replicas = l->nccl_replicas,
                         .host = l->host};
    if (st->feed)
        ec.feed = pt_feed_as_exec(st->feed);
    return pt_exec_create(&ec, &st->exec, err);
}

void pt_stage_unwire(pt_stage_replica *st)
{
    if (st)
        pt_exec_destroy(&st->exec);
}

const pt_exec_needs *pt_stage_needs(const pt_stage_replica *st)
{
    return &st->needs;
}

pt_net *pt_stage_net(pt_stage_replica *st)
{
    return st ? st->net : NULL;
}

pt_optim *pt_stage_optim(pt_stage_replica *st)
{
    return st ? st->optim : NULL;
}

pt_exec *pt_stage_exec(pt_stage_replica *st)
{
    return st ? st->exec : NULL;
}

pt_feed *pt_stage_feed(pt_stage_replica *st)
{
    return st ? st->feed : NULL;
}

void pt_stage_destroy(pt_stage_replica **st_p)
{
    if (!st_p || !*st_p)
        return;
    pt_stage_replica *st = *st_p;
    pt_exec_destroy(&st->exec);
    pt_optim_destroy(&st->optim);
    pt_net_destroy(&st->net);
    pt_feed_destroy(&st->feed);
    free(st);
    *st_p = NULL;
}
