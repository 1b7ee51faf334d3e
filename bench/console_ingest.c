/* console_ingest: how many telemetry events per second the console's ingest
 * path takes from N agents (--agents, default 16), and what it costs the
 * console in CPU.
 *
 * 1. decode+store: pre-encoded "events" messages of the N agents fed straight
 *    to pt_telemetry_rx_feed and pt_store_events (the work the console does
 *    per message, without sockets): the ceiling of one console thread. Then
 *    the same with the reference decoder, pt_msg_decode (a cJSON tree), in
 *    place of the events scanner (protocol/telemetry_scan.h): "cJSON+store".
 * 2. session, flat out: N simulated agents, each a DEALER that registers and
 *    heartbeats and an XPUB that streams events, all driven by one producer
 *    thread over loopback TCP; the console side is a real pt_session (default
 *    heartbeat and silence bounds) whose listener ingests into a pt_store,
 *    polled as the console's loop does. The producer keeps at most WINDOW
 *    events ahead of what the console took (memory stays bounded), so the
 *    figure is the most the console sustains.
 * 3. session, paced at --rate events/s (default 200,000) for --seconds,
 *    messages spread round-robin over the agents.
 *
 * Per session case: events/s the console received (from its first event to
 * its last, backlog included) and while the agents were sending; the console
 * thread's CPU seconds and CPU per million events; the whole process's CPU
 * (producer, ZeroMQ I/O threads and console share the cores); drops (sequence
 * gaps), telemetry and control messages the session refused, events sent but
 * never received; and how many agents the session still had live (not dead,
 * not gone) at the end.
 *
 *   console_ingest [--agents N] [--seconds S] [--batch EVENTS_PER_MESSAGE]
 *                  [--rate EVENTS_PER_S]
 *
 * Prints figures only; it never passes or fails on them. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/clock.h"
#include "protocol/fileio.h"
#include "protocol/message.h"
#include "protocol/telemetry.h"
#include "tui/control/session.h"
#include "tui/record/store.h"

#define DEFAULT_AGENTS  16
#define MAX_AGENTS      PT_RX_MAX_AGENTS
#define DEFAULT_SECONDS 3.0
#define DEFAULT_BATCH   256
#define DEFAULT_RATE    200000.0
#define EVENT_TEXT_MAX  192
#define HWM_MSGS        100000
#define HEARTBEAT_S     0.2
#define DRAIN_S         2.0
#define SETUP_S         60.0      /* registering and subscribing N agents */
#define WINDOW_EVENTS   (1 << 16) /* flat out: about a quarter second of console work */
#define FDS_PER_AGENT   6         /* two sockets (each a mailbox), two connections, both ends */
#define POLL_MS         1
#define NS_PER_S        1e9

/* The events array text of one message: a stage's ops of one step. */
static char *events_text(int agent, int batch, int64_t step)
{
    static const pt_op_kind ops[] = {PT_OP_FWD, PT_OP_SEND_ACT, PT_OP_BWD, PT_OP_SEND_GRAD};
    size_t cap = (size_t)batch * EVENT_TEXT_MAX + 16, n = 0;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    n += (size_t)snprintf(t + n, cap - n, "[");
    for (int i = 0; i < batch; i++) {
        int64_t start = step * 1000000 + i * 1000;
        n += (size_t)snprintf(t + n, cap - n,
                              "%s{\"stage\":%d,\"replica\":0,\"step\":%lld,\"mb\":%d,\"op\":\"%s\","
                              "\"version\":%lld,\"start_ns\":%lld,\"end_ns\":%lld,\"bytes\":%d}",
                              i ? "," : "", agent, (long long)step, i % 8, pt_op_name(ops[i % 4]),
                              (long long)step, (long long)start, (long long)(start + 800),
                              i % 2 ? 65536 : 0);
    }
    snprintf(t + n, cap - n, "]");
    return t;
}

/* One events message of agent a with sequence number seq; its length. The
 * events text is copied, not formatted: the producer stands in for agents
 * on other machines, and its cost is not the console's. */
static int message(char *out, size_t cap, int a, int64_t seq, const char *events)
{
    int n = snprintf(out, cap,
                     "{\"v\":1,\"type\":\"events\",\"agent\":\"a%d\",\"seq\":%lld,\"gen\":0,"
                     "\"events\":",
                     a, (long long)seq);
    size_t len = strlen(events);
    if (n < 0 || (size_t)n + len + 2 > cap)
        return 0;
    memcpy(out + n, events, len);
    memcpy(out + (size_t)n + len, "}", 2);
    return n + (int)len + 1;
}

/* ---- 1. decode + store, no sockets */

/* One message as the console takes it: the telemetry receiver's decode
 * (the scanner), or the reference decoder and the same sequence tracking. */
static int decode(pt_telemetry_rx *rx, const char *msg, size_t n, int reference, pt_msg *m)
{
    if (!reference)
        return pt_telemetry_rx_feed(rx, msg, n, "bench", m, NULL);
    int rc = pt_msg_decode(msg, n, "bench", m, NULL);
    if (rc == 0 && (rc = pt_telemetry_rx_observe(rx, m, NULL)) < 0)
        pt_msg_clear(m);
    return rc;
}

static void bench_decode_store(int agents, double seconds, int batch, int reference)
{
    pt_telemetry_rx *rx = NULL;
    pt_store *store = NULL;
    pt_telemetry_rx_create(PT_RX_FROM_FIRST, &rx);
    pt_store_new(0, &store);
    char **ev = calloc((size_t)agents, sizeof *ev);
    int64_t *seq = calloc((size_t)agents, sizeof *seq);
    int64_t events = 0, msgs = 0;
    size_t cap = (size_t)batch * EVENT_TEXT_MAX + 256;
    char *msg = malloc(cap);
    int ok = ev && seq && msg;
    for (int a = 0; ok && a < agents; a++)
        ok = (ev[a] = events_text(a, batch, 1)) != NULL;
    if (!ok)
        fprintf(stderr, "console_ingest: decode+store: out of memory\n");
    double t0 = pt_clock_s(), c0 = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID), t = t0;
    while (ok && t - t0 < seconds) {
        for (int a = 0; a < agents; a++) {
            int n = message(msg, cap, a, seq[a]++, ev[a]);
            pt_msg m;
            if (decode(rx, msg, (size_t)n, reference, &m) == 0) {
                events += pt_store_events(store, m.u.events.events, m.u.events.count, m.gen);
                pt_msg_clear(&m);
            }
            msgs++;
        }
        t = pt_clock_s();
    }
    double wall = t - t0, cpu = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    if (ok)
        printf("%-14s %10.0f events/s  %8.0f msgs/s  (%lld events in %.2f s; %.0f events "
               "per CPU second, %.2f CPU s per million events)\n",
               reference ? "cJSON+store" : "decode+store", events / wall, msgs / wall,
               (long long)events, wall, cpu > 0 ? events / cpu : 0,
               events > 0 ? cpu * 1e6 / (double)events : 0);
    for (int a = 0; ev && a < agents; a++)
        free(ev[a]);
    free(ev);
    free(seq);
    free(msg);
    pt_store_free(&store);
    pt_telemetry_rx_destroy(&rx);
}

/* ---- 2./3. through a session */

typedef struct producer {
    const char *control, *telemetry;
    int agents, batch;
    double rate; /* events/s, 0: flat out (at most WINDOW_EVENTS ahead of the console) */
    double seconds;
    atomic_llong *received;   /* events the console took so far */
    atomic_int registered_ok; /* set by the console side: all N registered */
    atomic_int done;          /* set by the producer when it stopped sending */
    atomic_int finish;        /* set by the console side: figures taken, agents may go */
    char failed[160];         /* why it gave up ("" none) */
    int64_t sent_events, sent_msgs;
    int64_t received_at_stop; /* the console's count when sending stopped */
    double send_s;            /* how long it sent */
    double send_cpu_s;        /* the producer thread's CPU while it sent */
    /* per agent */
    void **dealer, **pub;
    int64_t *seq, *ctl_seq;
    char **ev;
    int64_t hb;
    double next_hb;
} producer;

static void send_text(void *sock, const char *text)
{
    zmq_send(sock, text, strlen(text), 0);
}

/* Every agent's heartbeat, when one is due. */
static void heartbeats(producer *p, double t)
{
    if (t < p->next_hb)
        return;
    char text[256];
    for (int a = 0; a < p->agents; a++) {
        snprintf(text, sizeof text,
                 "{\"v\":1,\"type\":\"heartbeat\",\"agent\":\"a%d\",\"seq\":%lld,\"gen\":0,"
                 "\"hb\":%lld,\"t_send\":%lld}",
                 a, (long long)p->ctl_seq[a]++, (long long)p->hb, (long long)pt_msg_now_ns());
        send_text(p->dealer[a], text);
    }
    p->hb++;
    p->next_hb = t + HEARTBEAT_S;
}

/* The agents' sockets, connected, and their registers sent. 0, or -1 with
 * p->failed set. */
static int open_agents(producer *p, void *ctx)
{
    int hwm = HWM_MSGS, linger = 0;
    char text[512];
    for (int a = 0; a < p->agents; a++) {
        char id[16];
        snprintf(id, sizeof id, "a%d", a);
        p->dealer[a] = zmq_socket(ctx, ZMQ_DEALER);
        p->pub[a] = zmq_socket(ctx, ZMQ_XPUB);
        if (!p->dealer[a] || !p->pub[a]) {
            snprintf(p->failed, sizeof p->failed, "agent %d: zmq_socket: %s", a,
                     zmq_strerror(zmq_errno()));
            return -1;
        }
        zmq_setsockopt(p->dealer[a], ZMQ_ROUTING_ID, id, strlen(id));
        zmq_setsockopt(p->dealer[a], ZMQ_LINGER, &linger, sizeof linger);
        zmq_setsockopt(p->pub[a], ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(p->pub[a], ZMQ_LINGER, &linger, sizeof linger);
        if (zmq_connect(p->dealer[a], p->control) < 0 || zmq_connect(p->pub[a], p->telemetry) < 0) {
            snprintf(p->failed, sizeof p->failed, "agent %d: zmq_connect: %s", a,
                     zmq_strerror(zmq_errno()));
            return -1;
        }
        snprintf(text, sizeof text,
                 "{\"v\":1,\"type\":\"register\",\"agent\":\"%s\",\"seq\":0,\"gen\":0,"
                 "\"host\":\"bench\",\"pid\":%d,\"device\":%d,\"backend\":\"cpu\"}",
                 id, (int)getpid(), a);
        send_text(p->dealer[a], text);
        p->ctl_seq[a] = 1;
    }
    return 0;
}

/* Waits (heartbeating) until the console saw every register and every XPUB
 * has its subscriber: an event sent before that would be lost, and counted
 * as dropped. 0, or -1 with p->failed naming what did not come. */
static int await_ready(producer *p)
{
    double t0 = pt_clock_s();
    int subscribed = 0;
    char *joined = calloc((size_t)p->agents, 1);
    while (joined && (subscribed < p->agents || !atomic_load(&p->registered_ok))) {
        double t = pt_clock_s();
        heartbeats(p, t);
        if (t - t0 > SETUP_S) {
            snprintf(p->failed, sizeof p->failed,
                     "after %.0f s: %d of %d subscriptions, registers %s", SETUP_S, subscribed,
                     p->agents, atomic_load(&p->registered_ok) ? "all seen" : "not all seen");
            break;
        }
        int progress = 0;
        for (int a = 0; a < p->agents; a++) {
            char sub[64];
            if (!joined[a] && zmq_recv(p->pub[a], sub, sizeof sub, ZMQ_DONTWAIT) > 0) {
                joined[a] = 1;
                subscribed++;
                progress = 1;
            }
        }
        if (!progress)
            usleep(1000);
    }
    int ok = joined && subscribed == p->agents && atomic_load(&p->registered_ok);
    free(joined);
    return ok ? 0 : -1;
}

/* Streams events round-robin over the agents for p->seconds. */
static void stream(producer *p)
{
    size_t cap = (size_t)p->batch * EVENT_TEXT_MAX + 256;
    char *msg = malloc(cap);
    double t0 = pt_clock_s(), t = t0, c0 = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID);
    int a = 0;
    while (msg && (t = pt_clock_s()) - t0 < p->seconds) {
        heartbeats(p, t);
        if (p->rate > 0 ? p->sent_events > (t - t0) * p->rate
                        : p->sent_events - atomic_load(p->received) > WINDOW_EVENTS) {
            usleep(100);
            continue;
        }
        int n = message(msg, cap, a, p->seq[a]++, p->ev[a]);
        zmq_send(p->pub[a], msg, (size_t)n, 0);
        p->sent_events += p->batch;
        p->sent_msgs++;
        a = (a + 1) % p->agents;
    }
    p->send_s = t - t0;
    p->send_cpu_s = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    p->received_at_stop = atomic_load(p->received);
    free(msg);
}

static void *produce(void *arg)
{
    producer *p = arg;
    void *ctx = zmq_ctx_new();
    size_t n = (size_t)p->agents;
    p->dealer = calloc(n, sizeof *p->dealer);
    p->pub = calloc(n, sizeof *p->pub);
    p->seq = calloc(n, sizeof *p->seq);
    p->ctl_seq = calloc(n, sizeof *p->ctl_seq);
    p->ev = calloc(n, sizeof *p->ev);
    if (!ctx || !p->dealer || !p->pub || !p->seq || !p->ctl_seq || !p->ev)
        snprintf(p->failed, sizeof p->failed, "out of memory");
    else {
        zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, 2 * p->agents + 16);
        for (int a = 0; a < p->agents; a++)
            if (!(p->ev[a] = events_text(a, p->batch, 1)))
                snprintf(p->failed, sizeof p->failed, "out of memory");
        if (!p->failed[0] && open_agents(p, ctx) == 0 && await_ready(p) == 0)
            stream(p);
    }
    atomic_store(&p->done, 1);
    /* the agents stay alive (heartbeating) until the figures are taken */
    while (!p->failed[0] && !atomic_load(&p->finish)) {
        heartbeats(p, pt_clock_s());
        usleep(10000);
    }
    for (int a = 0; a < p->agents; a++) {
        if (p->dealer && p->dealer[a])
            zmq_close(p->dealer[a]);
        if (p->pub && p->pub[a])
            zmq_close(p->pub[a]);
        if (p->ev)
            free(p->ev[a]);
    }
    free(p->dealer);
    free(p->pub);
    free(p->seq);
    free(p->ctl_seq);
    free(p->ev);
    if (ctx)
        zmq_ctx_destroy(ctx);
    return NULL;
}

typedef struct sink {
    const pt_session *session;
    pt_store *store;
    atomic_llong events;
    double first_s, last_s;                /* wall clock of the first and the latest events */
    double first_cpu, last_cpu;            /* console thread CPU then */
    int dead;                              /* agents the session took for dead */
    double first_dead_s;                   /* when the first of them was */
    char first_dead[PT_MSG_TEXT_MAX + 96]; /* which, and why */
} sink;

static void on_note(void *user, const pt_session_note *n)
{
    sink *k = user;
    if (n->kind == PT_NOTE_DEAD && k->dead++ == 0) {
        k->first_dead_s = pt_clock_s();
        const pt_session_agent *a = pt_session_agent_at(k->session, n->agent);
        snprintf(k->first_dead, sizeof k->first_dead, "%s: %s", a ? a->id : "?",
                 n->text ? n->text : "");
    }
    if (n->kind != PT_NOTE_EVENTS)
        return;
    atomic_fetch_add(&k->events, pt_store_events(k->store, n->msg->u.events.events,
                                                 n->msg->u.events.count, n->msg->gen));
    k->last_s = pt_clock_s();
    k->last_cpu = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID);
    if (k->first_s == 0) {
        k->first_s = k->last_s;
        k->first_cpu = k->last_cpu;
    }
}

static double process_cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
           u.ru_stime.tv_usec / 1e6;
}

/* Polls like the console's loop: until all N registered (then tells the
 * producer), and after that until the producer stopped sending and every
 * event sent arrived, or none arrived for DRAIN_S (or it all takes too long). */
static void console_loop(pt_session *s, producer *p, sink *k, double seconds)
{
    double start = pt_clock_s(), stopped = 0;
    for (;;) {
        pt_session_poll(s, POLL_MS, NULL);
        if (!atomic_load(&p->registered_ok) && pt_session_agent_count(s) >= p->agents)
            atomic_store(&p->registered_ok, 1);
        double t = pt_clock_s();
        if (stopped == 0 && atomic_load(&p->done))
            stopped = t;
        if (stopped > 0 && (atomic_load(&k->events) >= p->sent_events ||
                            t - (k->last_s > stopped ? k->last_s : stopped) > DRAIN_S))
            return;
        if (t - start > SETUP_S + seconds * 8 + 20)
            return;
    }
}

/* Agents not dead and not gone; *stalled: of them, those silent past the
 * heartbeat bound. */
static int live_agents(const pt_session *s, int *stalled)
{
    int live = 0;
    *stalled = 0;
    for (int i = 0; i < pt_session_agent_count(s); i++) {
        const pt_session_agent *a = pt_session_agent_at(s, i);
        if (a->state != PT_AGENT_DEAD && a->state != PT_AGENT_GONE) {
            live++;
            *stalled += a->stalled;
        }
    }
    return live;
}

static void report(const char *label, const producer *p, sink *k, const pt_session *s,
                   double proc_cpu)
{
    double wall = k->last_s - k->first_s, cpu = k->last_cpu - k->first_cpu;
    long long got = (long long)atomic_load(&k->events);
    pt_session_counts c;
    pt_session_counts_get(s, &c);
    unsigned long long refused =
        c.telemetry.duplicates + c.telemetry.stale + c.telemetry.malformed + c.telemetry_rejected;
    int stalled = 0, live = live_agents(s, &stalled);
    printf("%-14s %10.0f events/s received (%.0f while sending), sent %lld, received %lld, "
           "never received %lld\n",
           label, wall > 0 ? (double)got / wall : 0,
           p->send_s > 0 ? (double)p->received_at_stop / p->send_s : 0, (long long)p->sent_events,
           got, (long long)p->sent_events - got);
    printf("%-14s console thread %.2f CPU s in %.2f s (%.0f%% of a core), %.2f CPU s per million "
           "events; whole process %.2f CPU s, of it the agents' producer thread %.2f (sending)\n",
           "", cpu, wall, wall > 0 ? 100.0 * cpu / wall : 0, got > 0 ? cpu * 1e6 / (double)got : 0,
           proc_cpu, p->send_cpu_s);
    printf("%-14s dropped %llu msgs (sequence gaps), telemetry refused %llu, control refused %llu, "
           "flooded %llu, sends failed %llu; agents live %d of %d (%d stalled)\n",
           "", (unsigned long long)c.telemetry.dropped, refused,
           (unsigned long long)c.control_rejected, (unsigned long long)c.control_flooded,
           (unsigned long long)c.sends_failed, live, p->agents, stalled);
    if (k->dead > 0)
        printf("%-14s %d agents taken for dead, the first %.1f s after the first event: %s\n", "",
               k->dead, k->first_s > 0 ? k->first_dead_s - k->first_s : 0, k->first_dead);
}

static void bench_session(const char *label, int agents, double seconds, int batch, double rate)
{
    pt_session_config cfg = {0}; /* the console's heartbeat and silence bounds */
    pt_session *s = NULL;
    pt_error err = {0};
    if (pt_session_create(&cfg, &s, &err) < 0) {
        fprintf(stderr, "console_ingest: %s\n", err.msg);
        return;
    }
    sink k;
    memset(&k, 0, sizeof k);
    atomic_init(&k.events, 0);
    pt_store_new(0, &k.store);
    k.session = s;
    pt_session_set_listener(s, on_note, &k);
    producer p;
    memset(&p, 0, sizeof p);
    p.control = pt_session_control_endpoint(s);
    p.telemetry = pt_session_telemetry_endpoint(s);
    p.agents = agents;
    p.batch = batch;
    p.rate = rate;
    p.seconds = seconds;
    p.received = &k.events;
    atomic_init(&p.registered_ok, 0);
    atomic_init(&p.done, 0);
    atomic_init(&p.finish, 0);
    double cpu0 = process_cpu_s();
    pthread_t th;
    pthread_create(&th, NULL, produce, &p);
    console_loop(s, &p, &k, seconds);
    if (p.failed[0])
        fprintf(stderr, "console_ingest: %s: agents: %s\n", label, p.failed);
    report(label, &p, &k, s, process_cpu_s() - cpu0);
    atomic_store(&p.finish, 1);
    pthread_join(th, NULL);
    pt_session_destroy(&s);
    pt_store_free(&k.store);
}

int main(int argc, char **argv)
{
    double seconds = DEFAULT_SECONDS, rate = DEFAULT_RATE;
    int batch = DEFAULT_BATCH, agents = DEFAULT_AGENTS;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rate"))
            rate = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--agents"))
            agents = atoi(argv[i + 1]);
    }
    if (seconds <= 0 || batch < 1 || batch > PT_MSG_MAX_EVENTS || rate < 0 || agents < 1 ||
        agents > MAX_AGENTS) {
        fprintf(stderr,
                "usage: console_ingest [--agents 1..%d] [--seconds S] [--batch N] "
                "[--rate EVENTS_PER_S]\n",
                MAX_AGENTS);
        return 2;
    }
    long fds = pt_fd_limit_raise();
    if (fds >= 0 && fds < (long)agents * FDS_PER_AGENT + 64) {
        fprintf(stderr,
                "console_ingest: %d agents need about %d descriptors; RLIMIT_NOFILE allows %ld\n",
                agents, agents * FDS_PER_AGENT + 64, fds);
        return 1;
    }
    printf("console_ingest: %d agents, %d events per message, %.1f s per case\n", agents, batch,
           seconds);
    bench_decode_store(agents, seconds, batch, 0);
    bench_decode_store(agents, seconds, batch, 1);
    bench_session("session max", agents, seconds, batch, 0);
    char label[32];
    snprintf(label, sizeof label, "session %.0fk/s", rate / 1000);
    bench_session(label, agents, seconds, batch, rate);
    return 0;
}
