/* console_ingest: how many telemetry events per second the console's ingest
 * path takes from 16 agents, and what it costs the console in CPU.
 *
 * 1. decode+store: pre-encoded "events" messages of 16 agents fed straight to
 *    pt_telemetry_rx_feed and pt_store_events (the work the console does per
 *    message, without sockets): the ceiling.
 * 2. session, flat out: 16 simulated agents (a DEALER that registers and
 *    heartbeats, a PUB that streams events) send as fast as one producer
 *    thread can over loopback TCP; the console side is a real pt_session whose
 *    listener ingests into a pt_store, polled as the console's loop does.
 * 3. session, paced at --rate events/s (default 200,000) for --seconds: events
 *    received, dropped (sequence gaps), and the console thread's CPU time.
 *
 *   console_ingest [--seconds S] [--batch EVENTS_PER_MESSAGE] [--rate EVENTS_PER_S]
 *
 * Prints figures only; it never passes or fails on them. */
#define _GNU_SOURCE /* pthread_tryjoin_np */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/clock.h"
#include "protocol/message.h"
#include "protocol/telemetry.h"
#include "tui/control/session.h"
#include "tui/record/store.h"

#define AGENTS          16
#define DEFAULT_SECONDS 3.0
#define DEFAULT_BATCH   256
#define DEFAULT_RATE    200000.0
#define EVENT_TEXT_MAX  192
#define HWM_MSGS        100000
#define HEARTBEAT_S     0.2
#define DRAIN_S         2.0
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

/* One events message of agent a with sequence number seq. */
static int message(char *out, size_t cap, int a, int64_t seq, const char *events)
{
    return snprintf(out, cap,
                    "{\"v\":1,\"type\":\"events\",\"agent\":\"a%d\",\"seq\":%lld,\"gen\":0,"
                    "\"events\":%s}",
                    a, (long long)seq, events);
}

/* ---- 1. decode + store, no sockets */

static void bench_decode_store(double seconds, int batch)
{
    pt_telemetry_rx *rx = NULL;
    pt_store *store = NULL;
    pt_telemetry_rx_create(PT_RX_FROM_FIRST, &rx);
    pt_store_new(0, &store);
    char *ev[AGENTS];
    for (int a = 0; a < AGENTS; a++)
        ev[a] = events_text(a, batch, 1);
    size_t cap = (size_t)batch * EVENT_TEXT_MAX + 256;
    char *msg = malloc(cap);
    int64_t seq[AGENTS] = {0}, events = 0, msgs = 0;
    double t0 = pt_clock_s(), c0 = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID), t = t0;
    while (t - t0 < seconds) {
        for (int a = 0; a < AGENTS; a++) {
            int n = message(msg, cap, a, seq[a]++, ev[a]);
            pt_msg m;
            if (pt_telemetry_rx_feed(rx, msg, (size_t)n, "bench", &m, NULL) == 0) {
                events += pt_store_events(store, m.u.events.events, m.u.events.count, m.gen);
                pt_msg_clear(&m);
            }
            msgs++;
        }
        t = pt_clock_s();
    }
    double wall = t - t0, cpu = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    printf("decode+store   %10.0f events/s  %8.0f msgs/s  (%lld events in %.2f s; %.0f events "
           "per CPU second)\n",
           events / wall, msgs / wall, (long long)events, wall, cpu > 0 ? events / cpu : 0);
    for (int a = 0; a < AGENTS; a++)
        free(ev[a]);
    free(msg);
    pt_store_free(&store);
    pt_telemetry_rx_destroy(&rx);
}

/* ---- 2./3. through a session */

typedef struct producer {
    const char *control, *telemetry;
    int batch;
    double rate; /* events/s, 0: flat out */
    double seconds;
    atomic_int registered_ok;
    int64_t sent_events, sent_msgs;
} producer;

static void send_text(void *sock, const char *text)
{
    zmq_send(sock, text, strlen(text), 0);
}

static void *produce(void *arg)
{
    producer *p = arg;
    void *ctx = zmq_ctx_new();
    void *dealer[AGENTS], *pub[AGENTS];
    int hwm = HWM_MSGS, linger = 0;
    char text[1024];
    for (int a = 0; a < AGENTS; a++) {
        char id[16];
        snprintf(id, sizeof id, "a%d", a);
        dealer[a] = zmq_socket(ctx, ZMQ_DEALER);
        zmq_setsockopt(dealer[a], ZMQ_ROUTING_ID, id, strlen(id));
        zmq_setsockopt(dealer[a], ZMQ_LINGER, &linger, sizeof linger);
        zmq_connect(dealer[a], p->control);
        pub[a] = zmq_socket(ctx, ZMQ_PUB);
        zmq_setsockopt(pub[a], ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(pub[a], ZMQ_LINGER, &linger, sizeof linger);
        zmq_connect(pub[a], p->telemetry);
        snprintf(text, sizeof text,
                 "{\"v\":1,\"type\":\"register\",\"agent\":\"%s\",\"seq\":0,\"gen\":0,"
                 "\"host\":\"bench\",\"pid\":%d,\"device\":%d,\"backend\":\"cpu\"}",
                 id, (int)getpid(), a);
        send_text(dealer[a], text);
    }
    while (!atomic_load(&p->registered_ok))
        usleep(1000);
    usleep(300000); /* PUB/SUB joins take a moment; messages before it are lost, not late */
    char *ev[AGENTS];
    for (int a = 0; a < AGENTS; a++)
        ev[a] = events_text(a, p->batch, 1);
    size_t cap = (size_t)p->batch * EVENT_TEXT_MAX + 256;
    char *msg = malloc(cap);
    int64_t seq[AGENTS] = {0}, hb = 0, ctl_seq[AGENTS];
    for (int a = 0; a < AGENTS; a++)
        ctl_seq[a] = 1;
    double t0 = pt_clock_s(), next_hb = t0, t = t0;
    while ((t = pt_clock_s()) - t0 < p->seconds) {
        if (t >= next_hb) {
            for (int a = 0; a < AGENTS; a++) {
                snprintf(text, sizeof text,
                         "{\"v\":1,\"type\":\"heartbeat\",\"agent\":\"a%d\",\"seq\":%lld,\"gen\":0,"
                         "\"hb\":%lld,\"t_send\":%lld}",
                         a, (long long)ctl_seq[a]++, (long long)hb, (long long)pt_msg_now_ns());
                send_text(dealer[a], text);
            }
            hb++;
            next_hb = t + HEARTBEAT_S;
        }
        if (p->rate > 0 && p->sent_events > (t - t0) * p->rate) {
            usleep(200);
            continue;
        }
        for (int a = 0; a < AGENTS; a++) {
            int n = message(msg, cap, a, seq[a]++, ev[a]);
            zmq_send(pub[a], msg, (size_t)n, 0);
            p->sent_events += p->batch;
            p->sent_msgs++;
        }
    }
    for (int a = 0; a < AGENTS; a++) {
        zmq_close(dealer[a]);
        zmq_close(pub[a]);
        free(ev[a]);
    }
    free(msg);
    zmq_ctx_destroy(ctx);
    return NULL;
}

typedef struct sink {
    pt_store *store;
    int64_t events;
    double first_s, last_s;     /* wall clock of the first and the latest events */
    double first_cpu, last_cpu; /* console thread CPU then */
} sink;

static void on_note(void *user, const pt_session_note *n)
{
    sink *k = user;
    if (n->kind != PT_NOTE_EVENTS)
        return;
    k->events +=
        pt_store_events(k->store, n->msg->u.events.events, n->msg->u.events.count, n->msg->gen);
    k->last_s = pt_clock_s();
    k->last_cpu = pt_clock_of_s(CLOCK_THREAD_CPUTIME_ID);
    if (k->first_s == 0) {
        k->first_s = k->last_s;
        k->first_cpu = k->last_cpu;
    }
}

static void bench_session(const char *label, double seconds, int batch, double rate)
{
    pt_session_config cfg = {.missed_heartbeats = 1000000};
    pt_session *s = NULL;
    pt_error err = {0};
    if (pt_session_create(&cfg, &s, &err) < 0) {
        fprintf(stderr, "console_ingest: %s\n", err.msg);
        return;
    }
    sink k;
    memset(&k, 0, sizeof k);
    pt_store_new(0, &k.store);
    pt_session_set_listener(s, on_note, &k);
    producer p;
    memset(&p, 0, sizeof p);
    p.control = pt_session_control_endpoint(s);
    p.telemetry = pt_session_telemetry_endpoint(s);
    p.batch = batch;
    p.rate = rate;
    p.seconds = seconds;
    atomic_init(&p.registered_ok, 0);
    pthread_t th;
    pthread_create(&th, NULL, produce, &p);
    while (pt_session_agent_count(s) < AGENTS)
        pt_session_poll(s, POLL_MS, NULL);
    atomic_store(&p.registered_ok, 1);
    /* poll like the console's loop until the producer is done and nothing
     * has arrived for DRAIN_S (or the backlog takes too long) */
    double start = pt_clock_s();
    void *ret = NULL;
    int joined = 0;
    for (;;) {
        pt_session_poll(s, POLL_MS, NULL);
        double t = pt_clock_s();
        if (!joined && t - start > seconds + 1.0 && pthread_tryjoin_np(th, &ret) == 0)
            joined = 1;
        if (joined && t - (k.last_s > 0 ? k.last_s : start) > DRAIN_S)
            break;
        if (t - start > seconds * 4 + 10)
            break;
    }
    if (!joined)
        pthread_join(th, NULL);
    double wall = k.last_s - k.first_s, cpu = k.last_cpu - k.first_cpu;
    pt_session_counts c;
    pt_session_counts_get(s, &c);
    printf("%-14s %10.0f events/s  sent %lld, received %lld events, dropped %llu msgs, "
           "console cpu %.0f%% of one core (%.2f s in %.2f s)\n",
           label, wall > 0 ? (double)k.events / wall : 0, (long long)p.sent_events,
           (long long)k.events, (unsigned long long)c.telemetry.dropped,
           wall > 0 ? 100.0 * cpu / wall : 0, cpu, wall);
    pt_session_destroy(&s);
    pt_store_free(&k.store);
}

int main(int argc, char **argv)
{
    double seconds = DEFAULT_SECONDS, rate = DEFAULT_RATE;
    int batch = DEFAULT_BATCH;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rate"))
            rate = atof(argv[i + 1]);
    }
    if (seconds <= 0 || batch < 1 || batch > PT_MSG_MAX_EVENTS || rate < 0) {
        fprintf(stderr, "usage: console_ingest [--seconds S] [--batch N] [--rate EVENTS_PER_S]\n");
        return 2;
    }
    printf("console_ingest: %d agents, %d events per message, %.1f s per case\n", AGENTS, batch,
           seconds);
    bench_decode_store(seconds, batch);
    bench_session("session max", seconds, batch, 0);
    char label[32];
    snprintf(label, sizeof label, "session %.0fk/s", rate / 1000);
    bench_session(label, seconds, batch, rate);
    return 0;
}
