/* pipetop-agent --observe DIR: the worker of an observed run. Instead of
 * training, it relays what a PyTorch process's pipetop_torch.Monitor writes
 * on a Unix socket (agent/observe_line.h) to the console as this agent's own
 * telemetry: an events message per iteration, folded metrics (loss, samples
 * per second, iteration time), through the worker's PUB socket and the
 * protocol's encoder, so the console's trust rules and the wire format are
 * the training agent's.
 *
 * It runs the worker's state machine's commands (agent/worker.c's calls set
 * them) its own way: an assign opens DIR/rank-<r>.sock for the pipeline rank
 * r of its first chunk (rank-<r>-<replica>.sock for another replica), mode
 * 0600 in a folder of mode 0700; a start relays; a stop or hold is answered
 * at once with the iterations seen (a PyTorch run is not stopped from
 * here); checkpoints are refused (the model's weights are PyTorch's). One
 * Monitor at a time, of this user (SO_PEERCRED). */
#define _GNU_SOURCE /* struct ucred, accept4 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "agent/observe_line.h"
#include "protocol/clock.h"
#include "agent/worker_internal.h"

#define OBS_POLL_MS          20 /* a command waits at most this long for the relay to look */
#define OBS_SOCK_FMT         "%s/rank-%d.sock"
#define OBS_SOCK_REPLICA_FMT "%s/rank-%d-%d.sock"

typedef struct obs {
    int lfd, cfd; /* the listening socket, the Monitor's connection (-1: none) */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char buf[PT_OBS_LINE_MAX];
    size_t have; /* bytes of an unfinished line in buf */
    int hello;   /* the connection said hello */
    int stages[CHUNKS_MAX], nstages, last_stage, mb_count;
    int64_t step;      /* the iteration events are gathered for */
    int64_t mono_base; /* CLOCK_MONOTONIC ns minus pt_msg_now_ns() */
    int64_t prev_end;  /* the last iteration's end (monotonic ns), 0 none */
    uint64_t refused;  /* lines refused */
} obs;

static void close_client(obs *o)
{
    if (o->cfd >= 0)
        close(o->cfd);
    o->cfd = -1;
    o->have = 0;
    o->hello = 0;
}

static void close_listener(obs *o)
{
    close_client(o);
    if (o->lfd >= 0) {
        close(o->lfd);
        unlink(o->path);
    }
    o->lfd = -1;
}

/* DIR/rank-<r>.sock for the assign, listening. */
static int open_listener(pt_agent_worker *w, obs *o, const pt_msg_assign *as, pt_error *err)
{
    close_listener(o);
    int P = pt_plan_rank_count(as->plan), r = as->stage % (P > 0 ? P : 1);
    int n = as->replica ? snprintf(o->path, sizeof o->path, OBS_SOCK_REPLICA_FMT, w->observe_dir, r,
                                   as->replica)
                        : snprintf(o->path, sizeof o->path, OBS_SOCK_FMT, w->observe_dir, r);
    if (n < 0 || (size_t)n >= sizeof o->path)
        return pt_error_set(err, PT_EINVAL,
                            "observe: %s/rank-%d.sock is longer than a Unix socket "
                            "path may be (%zu bytes)",
                            w->observe_dir, r, sizeof o->path - 1);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, o->path, strlen(o->path) + 1);
    unlink(o->path);
    o->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (o->lfd < 0 || bind(o->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        chmod(o->path, 0600) != 0 || listen(o->lfd, 1) != 0) {
        int e = errno;
        close_listener(o);
        return pt_error_set(err, PT_EIO, "observe: %s: %s", o->path, strerror(e));
    }
    return 0;
}

static void accept_client(pt_agent_worker *w, obs *o)
{
    int fd = accept4(o->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (o->cfd >= 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 ||
        cr.uid != getuid()) {
        fprintf(stderr, "pipetop-agent %s: observe: a connection refused (%s)\n", w->id,
                o->cfd >= 0 ? "a Monitor is connected already" : "another user's");
        close(fd);
        return;
    }
    o->cfd = fd;
    fprintf(stderr, "pipetop-agent %s: observe: a Monitor (pid %d) connected to %s\n", w->id,
            (int)cr.pid, o->path);
}

static int chunk_of(const obs *o, int stage)
{
    for (int c = 0; c < o->nstages; c++)
        if (o->stages[c] == stage)
            return c;
    return -1;
}

static int push_event(run_state *r, const pt_msg_event *e)
{
    if (r->nev == r->evcap) {
        int cap = r->evcap ? 2 * r->evcap : EVENTS_INITIAL_CAP;
        if (cap > PT_MSG_MAX_EVENTS)
            return PT_ERANGE;
        pt_msg_event *n = realloc(r->events, (size_t)cap * sizeof *n);
        if (!n)
            return PT_ENOMEM;
        r->events = n;
        r->evcap = cap;
    }
    r->events[r->nev++] = *e;
    return 0;
}

/* Publishes iteration l->step's events and one metrics message per stage of
 * this agent, and counts it done. */
static void end_step(pt_agent_worker *w, obs *o, const pt_obs_line *l, int relay)
{
    run_state *r = &w->r;
    if (relay)
        pt_wk_publish_events(w);
    r->nev = 0;
    double iter_ms = o->prev_end > 0 ? (double)(l->end_ns - o->prev_end) / 1e6 : 0;
    o->prev_end = l->end_ns;
    for (int c = 0; relay && c < o->nstages; c++) {
        pt_msg_metrics mt;
        memset(&mt, 0, sizeof mt);
        mt.stage = o->stages[c];
        mt.step = l->step;
        mt.loss = o->stages[c] == o->last_stage ? l->loss : NAN;
        mt.iter_ms = iter_ms > 0 ? iter_ms : 0;
        mt.samples_per_s = iter_ms > 0 ? (double)l->samples / (iter_ms / 1e3) : 0;
        pt_wk_fold_metrics(w, c, &mt);
    }
    pthread_mutex_lock(&w->mu);
    w->done = l->step + 1;
    pthread_mutex_unlock(&w->mu);
    o->step = l->step + 1;
    pt_wk_notify_simple(w, PT_WNOTE_STEP, 0, l->step + 1, 0, NULL);
}

/* One line of the Monitor; a bad one is counted and said (the first few). */
static void take_line(pt_agent_worker *w, obs *o, const char *text, size_t len, int relay)
{
    pt_obs_line l;
    pt_error err = {0};
    int rc = pt_obs_parse(text, len, &l, &err);
    if (rc == 0 && !o->hello && l.type != PT_OBS_HELLO_LINE)
        rc = pt_error_set(&err, PT_EINVAL, "the first line must be \"%s\"", PT_OBS_HELLO);
    if (rc == 0 && l.type != PT_OBS_HELLO_LINE && l.step < o->step)
        rc = pt_error_set(&err, PT_EINVAL, "iteration %lld: iteration %lld is done",
                          (long long)l.step, (long long)o->step - 1);
    if (rc == 0 && l.type == PT_OBS_OP && chunk_of(o, l.stage) < 0)
        rc = pt_error_set(&err, PT_EINVAL, "op: STAGE: %d is not this agent's", l.stage);
    if (rc == 0 && l.type == PT_OBS_OP && l.mb >= o->mb_count)
        rc = pt_error_set(&err, PT_EINVAL, "op: MB: %d, the plan has %d micro-batches", l.mb,
                          o->mb_count);
    if (rc < 0) {
        if (o->refused++ < 8)
            fprintf(stderr, "pipetop-agent %s: observe: line refused: %s\n", w->id, err.msg);
        return;
    }
    if (l.type == PT_OBS_HELLO_LINE) {
        o->hello = 1;
        return;
    }
    if (l.step > o->step) { /* an iteration whose step line never came: its ops go out now */
        if (relay)
            pt_wk_publish_events(w);
        w->r.nev = 0;
        o->step = l.step;
    }
    if (l.type == PT_OBS_STEP) {
        end_step(w, o, &l, relay);
        return;
    }
    int64_t s = l.start_ns - o->mono_base, e = l.end_ns - o->mono_base;
    pt_msg_event ev = {l.stage, w->r.replica,  l.step,        l.mb, (pt_op_kind)l.op,
                       -1,      s > 0 ? s : 0, e > 0 ? e : 0, 0};
    if (push_event(&w->r, &ev) < 0 && o->refused++ < 8)
        fprintf(stderr, "pipetop-agent %s: observe: iteration %lld: too many ops\n", w->id,
                (long long)l.step);
}

/* Reads what the Monitor sent; whole lines go to take_line. */
static void read_client(pt_agent_worker *w, obs *o, int relay)
{
    for (;;) {
        ssize_t k = read(o->cfd, o->buf + o->have, sizeof o->buf - o->have);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (k <= 0) {
            fprintf(stderr,
                    "pipetop-agent %s: observe: the Monitor disconnected after iteration "
                    "%lld\n",
                    w->id, (long long)o->step - 1);
            close_client(o);
            return;
        }
        o->have += (size_t)k;
        char *nl;
        while ((nl = memchr(o->buf, '\n', o->have))) {
            size_t len = (size_t)(nl - o->buf);
            take_line(w, o, o->buf, len, relay);
            memmove(o->buf, nl + 1, o->have - len - 1);
            o->have -= len + 1;
        }
        if (o->have == sizeof o->buf) { /* no newline within a line's bound */
            fprintf(stderr, "pipetop-agent %s: observe: a line over %d bytes; disconnecting\n",
                    w->id, PT_OBS_LINE_MAX);
            close_client(o);
            return;
        }
    }
}

/* A new generation: this agent's stages, the telemetry endpoint, the socket. */
static void observe_assign(pt_agent_worker *w, obs *o, pt_msg *m)
{
    const pt_msg_assign *as = &m->u.assign;
    pt_wk_flush_metrics(w);
    pt_error err = {0};
    int P = pt_plan_rank_count(as->plan), chunks = as->chunks > 1 ? as->chunks : 1;
    o->nstages = 0;
    for (int c = 0; c < chunks && c < CHUNKS_MAX; c++)
        o->stages[o->nstages++] = as->stage + c * P;
    o->last_stage = as->plan->stage_count - 1;
    o->mb_count = as->plan->microbatch_count;
    o->step = as->resume_step;
    o->prev_end = 0;
    w->r.gen = m->gen;
    w->r.stage = as->stage;
    w->r.replica = as->replica;
    w->r.nev = 0;
    pt_wk_connect_telemetry(w, w->tel_fixed[0] ? w->tel_fixed : as->telemetry);
    int rc = open_listener(w, o, as, &err);
    pt_wnote n = {0};
    n.kind = PT_WNOTE_SETUP;
    n.rc = rc;
    n.gen = m->gen;
    n.req = m->req;
    n.stage = as->stage;
    n.replica = as->replica;
    if (rc < 0)
        snprintf(n.text, sizeof n.text, "%.500s", err.msg);
    else
        fprintf(stderr, "pipetop-agent %s: observe: generation %lld: stages", w->id,
                (long long)m->gen);
    for (int c = 0; rc == 0 && c < o->nstages; c++)
        fprintf(stderr, " %d", o->stages[c]);
    if (rc == 0)
        fprintf(stderr, " of %d; waiting for a Monitor on %s\n", as->plan->stage_count, o->path);
    pt_wk_assigned(w, m->gen, as->resume_step, rc, &n);
}

/* The commands the control thread set; 1 when one was served (look again),
 * -1 on quit. *relay: relay the Monitor's lines now. Called with mu held;
 * returns with it held. */
static int serve_command(pt_agent_worker *w, obs *o, int *relay)
{
    if (w->quit)
        return -1;
    if (w->assign) {
        pt_msg *m = w->assign;
        w->assign = NULL;
        pthread_mutex_unlock(&w->mu);
        observe_assign(w, o, m);
        pt_msg_clear(m);
        free(m);
        pthread_mutex_lock(&w->mu);
        return 1;
    }
    if (w->has_stop) { /* a PyTorch run is not stopped from here: stop relaying at once */
        int64_t req = w->stop_req, done = w->done;
        w->has_stop = w->hold = w->running = 0;
        snprintf(w->state, sizeof w->state, "stopped");
        pthread_mutex_unlock(&w->mu);
        pt_wk_flush_metrics(w);
        pt_wk_notify_simple(w, PT_WNOTE_STOPPED, req, done, 0, NULL);
        pthread_mutex_lock(&w->mu);
        return 1;
    }
    if (w->nckpt > 0) {
        w->nckpt = 0;
        fprintf(stderr,
                "pipetop-agent %s: observe: checkpoint requests ignored: an observed "
                "run's weights are its own process's\n",
                w->id);
    }
    if (w->running && w->hold)
        snprintf(w->state, sizeof w->state, "holding");
    *relay = w->running && !w->hold;
    return 0;
}

void *pt_wk_observe_main(void *arg)
{
    pt_agent_worker *w = arg;
    obs o;
    memset(&o, 0, sizeof o);
    o.lfd = o.cfd = -1;
    o.mono_base = pt_clock_ns() - pt_msg_now_ns();
    w->notify = zmq_socket(w->ctx, ZMQ_PAIR);
    if (w->notify)
        zmq_connect(w->notify, w->notify_ep);
    pt_wk_connect_telemetry(w, w->tel_fixed);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int relay = 0, rc = serve_command(w, &o, &relay);
        if (rc < 0)
            break;
        if (rc > 0)
            continue;
        pthread_mutex_unlock(&w->mu);
        struct pollfd p[2] = {{o.lfd, POLLIN, 0}, {o.cfd, POLLIN, 0}};
        if (poll(p, 2, OBS_POLL_MS) > 0) {
            if (o.lfd >= 0 && (p[0].revents & POLLIN))
                accept_client(w, &o);
            if (o.cfd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
                read_client(w, &o, relay);
        }
        if (pt_wk_folds_pending(w) &&
            pt_msg_now_ns() - w->fold_sent_ns >= FOLD_FLUSH_MS * NS_PER_MS)
            pt_wk_flush_metrics(w);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    pt_wk_flush_metrics(w);
    close_listener(&o);
    if (o.refused)
        fprintf(stderr, "pipetop-agent %s: observe: %llu lines refused\n", w->id,
                (unsigned long long)o.refused);
    free(w->r.events);
    w->r.events = NULL;
    pt_wk_exit(w);
    return NULL;
}

int pt_agent_observe_dir_ok(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "pipetop-agent: --observe %s: %s\n", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 0777) != 0700) {
        fprintf(stderr,
                "pipetop-agent: --observe %s: %s; it must be a folder of yours with mode 0700, so "
                "no one else can reach its sockets\n",
                dir,
                !S_ISDIR(st.st_mode)    ? "not a folder"
                : st.st_uid != getuid() ? "another user's folder"
                                        : "its mode is not 0700");
        return -1;
    }
    return 0;
}
