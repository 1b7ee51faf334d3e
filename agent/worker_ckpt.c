/* The worker's checkpoints: every chunk's layers and its stage's manifest
 * into a step folder (the console commits the index), and a resume's load.
 * See agent/worker_internal.h and docs/formats.md, "Run checkpoints". */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "agent/worker_internal.h"
#include "protocol/fileio.h"
#include "runtime/checkpoint.h"
#include "runtime/feed.h"
#include "runtime/optim.h"

int pt_wk_load_resume(pt_agent_worker *w, int64_t step, pt_error *err)
{
    run_state *r = &w->r;
    char dir[PT_MSG_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/step-%lld", r->ckpt_dir, (long long)step);
    pt_ckpt_info info;
    int rc = 0;
    for (int c = 0; c < r->nch && rc == 0; c++)
        rc = pt_ckpt_load(dir, r->spec, pt_stage_net(r->ch[c].st), pt_stage_optim(r->ch[c].st),
                          &info, err);
    if (rc < 0)
        return rc;
    if (info.step != step)
        return pt_error_set(err, PT_EINVAL, "%s holds step %lld, not the resume step %lld", dir,
                            (long long)info.step, (long long)step);
    r->last_saved = step;
    return 0;
}

/* ---- checkpoints ---------------------------------------------------------------- */

/* Writes chunk ch's layers and its stage's manifest into dir (step's folder). */
static int save_chunk(run_state *r, const chunk *ch, int64_t step, const char *dir, pt_error *err)
{
    pt_ckpt_layer *layers = NULL;
    int count = 0;
    int rc = pt_ckpt_write_layers(dir, r->spec, pt_stage_net(ch->st), pt_stage_optim(ch->st), step,
                                  &layers, &count, err);
    if (rc < 0)
        return rc;
    const pt_feed *feed = NULL;
    for (int c = 0; c < r->nch && !feed; c++)
        feed = pt_stage_feed(r->ch[c].st);
    pt_ckpt_index ix = {0};
    snprintf(ix.model, sizeof ix.model, "%s", r->spec->name);
    ix.step = step;
    ix.epoch = feed ? (double)step / (double)pt_feed_batches_per_epoch(feed) : 0;
    ix.has_optimizer = 1;
    ix.optimizer = r->plan->optimizer;
    ix.optim_steps = pt_optim_steps(pt_stage_optim(ch->st));
    ix.layer_count = count;
    ix.layers = layers;
    char *text = pt_ckpt_index_to_json(&ix);
    char path[PT_MSG_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/" PT_AGENT_MANIFEST_FMT, dir, ch->stage);
    if (!text)
        rc = pt_error_set(err, PT_ENOMEM, "checkpoint manifest: out of memory");
    else
        rc = pt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    pt_ckpt_layers_free(&layers, count);
    return rc;
}

/* Saves this agent's stages (every chunk's) after `step` iterations into
 * <dir>/step-<step>, each with the manifest the console commits from.
 * Replicas other than 0 hold the same weights and save nothing. */
static int save_checkpoint(pt_agent_worker *w, int64_t step, char *dir_out, size_t cap,
                           pt_error *err)
{
    run_state *r = &w->r;
    snprintf(dir_out, cap, "%.1000s/step-%lld", r->ckpt_dir, (long long)step);
    if (r->last_saved == step || r->replica != 0)
        return 0;
    int rc = 0;
    for (int c = 0; c < r->nch && rc == 0; c++)
        rc = save_chunk(r, &r->ch[c], step, dir_out, err);
    if (rc == 0)
        r->last_saved = step;
    return rc;
}

void pt_wk_do_save(pt_agent_worker *w, int64_t step, int64_t req)
{
    pt_wnote n = {0};
    pt_error err = {0};
    n.stage = w->r.stage;
    n.replica = w->r.replica;
    n.gen = w->r.gen;
    n.req = req;
    n.step = step;
    if (!w->r.ckpt_dir[0]) {
        n.kind = PT_WNOTE_FAILED;
        n.rc = PT_EINVAL;
        snprintf(n.text, sizeof n.text, "checkpoint asked, but the assign named no folder");
        pt_wk_notify(w, &n);
        return;
    }
    pt_wk_set_state(w, "saving");
    int rc = w->ops && w->ops->save ? w->ops->save(w, step, n.dir, sizeof n.dir, &err)
                                    : save_checkpoint(w, step, n.dir, sizeof n.dir, &err);
    n.kind = rc == 0 ? PT_WNOTE_CKPT : PT_WNOTE_FAILED;
    n.rc = rc;
    if (rc < 0)
        snprintf(n.text, sizeof n.text, "checkpoint step %lld: %.450s", (long long)step, err.msg);
    pt_wk_notify(w, &n);
}

/* Serves checkpoint requests due at `done` iterations (all of them when
 * `all`, e.g. when idle). */
void pt_wk_serve_ckpt_requests(pt_agent_worker *w, int64_t done, int all)
{
    for (;;) {
        ckpt_req q = {0, 0};
        int found = 0;
        pthread_mutex_lock(&w->mu);
        for (int k = 0; k < w->nckpt; k++)
            if (all || w->ckpts[k].step < 0 || w->ckpts[k].step <= done) {
                q = w->ckpts[k];
                w->ckpts[k] = w->ckpts[--w->nckpt];
                found = 1;
                break;
            }
        pthread_mutex_unlock(&w->mu);
        if (!found)
            return;
        pt_wk_do_save(w, done, q.req);
    }
}
