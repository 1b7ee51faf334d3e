/* Attacks on the data plane of a real 2-stage `pipetop run` (agents started
 * by hand with known data endpoints, as on other hosts), by a small C peer
 * that pushes forged data frames at both agents while they train:
 *   - another run's token, a stale generation, a sender that is no peer or
 *     the receiver itself (from the start);
 *   - replays of sequence numbers already used, with the right token and
 *     generation (once the run is past its first steps), and frames that
 *     claim the sender whose messages come through shared memory;
 *   - a flood of unmatched frames with a valid header.
 * Every forged frame is dropped and counted (the agents' logs name the
 * reasons), and the weights equal those of an undisturbed run, over shared
 * memory and with shared memory off (PT_COMM_SHM=0, ZeroMQ as between hosts).
 * The flood leaves the agents' early-arrival buffers under their stated
 * bound and their memory (VmHWM) within a stated margin of an undisturbed
 * agent's. */
#include <pthread.h>
#include <sys/stat.h>
#include <zmq.h>

#include "runtime/comm.h"
#include "tests/tui/run_util.h"

#define TDIR         "dplane_attack_itest.d"
#define RUN_MS       240000 /* each wait's bound on an idle machine; ru_budget_ms scales it */
#define SEND_MS      5000   /* a forged frame's send bound (likewise scaled) */
#define ITERS        "12"
#define FLOOD_ITERS  "60" /* long enough that the whole flood lands while it runs */
#define TOKEN_HEX    "5eedc0ffee123457"
#define TOKEN        0x5eedc0ffee123457ull
#define GEN          1    /* the first plan's generation */
#define REPLAYS      8    /* sequence numbers 0..7, each long used when replayed */
#define FLOOD        4000 /* frames of the flood, 64 KiB each: 250 MiB offered */
#define FLOOD_FLOATS (16 << 10)
/* An attacked agent may peak above an undisturbed one by ZeroMQ's own
 * buffers for frames in flight (at most 256 per connection) and the
 * allocator's, never by the offered flood (250 MiB). */
#define RSS_MARGIN_KB (64 << 10)

static const char *model(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s", pt_test_path("models/fmnist-mlp-deep.json"));
    return path;
}

/* 1 when ZeroMQ took both parts of the frame (the count the agents' drops
 * are compared with). */
static int forge(void *sock, uint32_t src, uint64_t tag, uint64_t seq, uint64_t token, uint64_t gen,
                 const float *v, size_t n)
{
    unsigned char h[PT_COMM_HEADER_BYTES];
    uint32_t magic = PT_COMM_MAGIC;
    uint64_t f[5] = {tag, n, seq, token, gen};
    memcpy(h, &magic, 4);
    memcpy(h + 4, &src, 4);
    for (int i = 0; i < 5; i++)
        memcpy(h + 8 + 8 * i, &f[i], 8);
    return zmq_send(sock, h, sizeof h, ZMQ_SNDMORE) >= 0 &&
           zmq_send(sock, v, n * sizeof *v, 0) >= 0;
}

/* The last "dropped N frames (...)" line of an agent log: N and the line. */
static long long dropped_in_log(const char *log, char *line, size_t cap)
{
    char *text = NULL;
    long long n = -1;
    line[0] = '\0';
    if (pt_file_read(log, &text, NULL, NULL) < 0)
        return -1;
    for (char *p = text; (p = strstr(p, "data plane dropped ")); p++) {
        n = strtoll(p + strlen("data plane dropped "), NULL, 10);
        size_t len = strcspn(p, "\n");
        snprintf(line, cap, "%.*s", (int)(len < cap ? len : cap - 1), p);
    }
    free(text);
    return n;
}

/* "name N" inside the dropped line, or -1. */
static long long field(const char *line, const char *name)
{
    const char *p = strstr(line, name);
    return p ? strtoll(p + strlen(name), NULL, 10) : -1;
}

/* The agent's early-arrival bound from its log, or 0. */
static long long bound_in_log(const char *log)
{
    char *text = NULL;
    long long n = 0;
    if (pt_file_read(log, &text, NULL, NULL) < 0)
        return 0;
    const char *p = strstr(text, "early-arrival buffer bound ");
    if (p)
        n = strtoll(p + strlen("early-arrival buffer bound "), NULL, 10);
    free(text);
    return n;
}

/* VmHWM of a live process in KiB, or -1. */
static long vm_hwm_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

typedef enum { ATTACK_NONE, ATTACK_FORGE, ATTACK_FLOOD } attack;

/* The console of a run: its pid, and its exit status once reaped. */
typedef struct console_proc {
    pid_t pid;
    int reaped, status;
} console_proc;

/* 1 while the console runs (a wait for its output ends when it exited). */
static int console_runs(console_proc *c)
{
    int st;
    if (!c->reaped && waitpid(c->pid, &st, WNOHANG) == c->pid) {
        c->reaped = 1;
        c->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    return !c->reaped;
}

/* Waits until the console's --json output has n step lines or the console
 * ended, within a bound that scales with the load. 1 when the steps came. */
static int wait_steps(const char *out, int n, console_proc *c)
{
    int64_t t0 = ru_now_ms(), bound = ru_budget_ms(RUN_MS);
    while (ru_steps_seen(out) < n && console_runs(c) && ru_now_ms() - t0 < bound)
        usleep(5000);
    return ru_steps_seen(out) >= n;
}

typedef struct run_out {
    int status;
    long long dropped[2];
    char line[2][512];
    long long bound[2];
    long hwm_kb[2];
    int sent[2]; /* forged frames sent to each agent */
} run_out;

/* One run of ITERS steps with two agents started here, checkpointed into
 * DIR/name.ck; the attack (if any) goes at both agents' data endpoints. */
static void run_one(const char *name, const char *iters, int shm, attack what, run_out *o)
{
    memset(o, 0, sizeof *o);
    char rd[256], out[256], err[256], ck[256];
    snprintf(rd, sizeof rd, TDIR "/%s.run", name);
    snprintf(out, sizeof out, TDIR "/%s.out", name);
    snprintf(err, sizeof err, TDIR "/%s.err", name);
    snprintf(ck, sizeof ck, TDIR "/%s.ck", name);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", rd, ck); /* an older record names old ports */
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", rd);
    setenv("PT_RUN_TOKEN", TOKEN_HEX, 1);
    if (shm)
        unsetenv("PT_COMM_SHM");
    else
        setenv("PT_COMM_SHM", "0", 1);
    ru_argv run;
    ru_run_argv(&run, model(), rd, "--external", "--stages", "2", "--schedule", "gpipe",
                "--microbatches", "4", "--iters", iters, "--checkpoint-dir", ck, NULL);
    console_proc console = {ru_start(run.v, out, err), 0, -1};
    REQUIRE(console.pid > 0);
    char rec[300], ctl[256] = "", tel[256] = "";
    snprintf(rec, sizeof rec, "%s/run.ndjson", rd);
    int64_t t0 = ru_now_ms(), bound = ru_budget_ms(RUN_MS);
    while (!ru_endpoints(rec, ctl, tel, sizeof ctl) && console_runs(&console) &&
           ru_now_ms() - t0 < bound)
        usleep(20000);
    if (!ctl[0] || !tel[0])
        ru_show_tail("the console", err);
    REQUIRE(ctl[0] && tel[0]);
    char data_ep[2][256], log[2][256], dev[2][4], nm[2][32];
    pid_t ag[2];
    for (int a = 0; a < 2; a++) {
        snprintf(data_ep[a], sizeof data_ep[a], "ipc://%s/%s.d%d", TDIR, name, a);
        snprintf(log[a], sizeof log[a], TDIR "/%s.agent%d.err", name, a);
        snprintf(dev[a], sizeof dev[a], "%d", a);
        snprintf(nm[a], sizeof nm[a], "%s-%d", name, a);
        char lo[256];
        snprintf(lo, sizeof lo, TDIR "/%s.agent%d.out", name, a);
        /* --checkpoint-root as `pipetop run --external` tells */
        ru_agent ra = {ctl,        tel,       dev[a],        nm[a],
                       .root = ck, .out = lo, .err = log[a], .data_bind = data_ep[a]};
        ag[a] = ru_start_agent(&ra);
        REQUIRE(ag[a] > 0);
    }
    void *ctx = zmq_ctx_new(), *sock[2];
    int linger = 0;
    for (int a = 0; a < 2; a++) {
        sock[a] = zmq_socket(ctx, ZMQ_PUSH);
        int send_ms = ru_budget_ms(SEND_MS); /* an agent that left takes nothing more */
        zmq_setsockopt(sock[a], ZMQ_LINGER, &linger, sizeof linger);
        zmq_setsockopt(sock[a], ZMQ_SNDTIMEO, &send_ms, sizeof send_ms);
        zmq_connect(sock[a], data_ep[a]);
    }
    float junk[64];
    for (int i = 0; i < 64; i++)
        junk[i] = 1e3f;
    if (what == ATTACK_FORGE) {
        /* from the start: frames nobody in this run could have sent */
        for (int a = 0; a < 2; a++)
            for (int mb = 0; mb < 4; mb++) {
                uint64_t tag = pt_comm_tag(a ? PT_COMM_ACT : PT_COMM_GRAD, (uint32_t)mb, 0);
                uint32_t peer = (uint32_t)(1 - a);
                o->sent[a] +=
                    forge(sock[a], peer, tag, (uint64_t)mb, TOKEN ^ 0xffff, GEN, junk, 64);
                o->sent[a] += forge(sock[a], peer, tag, (uint64_t)mb, TOKEN, GEN + 7, junk, 64);
                o->sent[a] += forge(sock[a], (uint32_t)a, tag, (uint64_t)mb, TOKEN, GEN, junk,
                                    64); /* itself */
                o->sent[a] +=
                    forge(sock[a], 9, tag, (uint64_t)mb, TOKEN, GEN, junk, 64); /* no rank */
            }
        /* past the first steps: replays of sequence numbers already used */
        CHECK_MSG(wait_steps(out, 2, &console), "%s: no second step before the replays", name);
        for (int a = 0; a < 2; a++)
            for (int q = 0; q < REPLAYS; q++) {
                uint64_t tag = pt_comm_tag(a ? PT_COMM_ACT : PT_COMM_GRAD, (uint32_t)(q % 4), 0);
                o->sent[a] +=
                    forge(sock[a], (uint32_t)(1 - a), tag, (uint64_t)q, TOKEN, GEN, junk, 64);
            }
    } else if (what == ATTACK_FLOOD) {
        /* unmatched frames with a valid header, as fast as ZeroMQ takes them */
        float *big = calloc(FLOOD_FLOATS, sizeof(float));
        for (int i = 0; i < FLOOD; i++)
            for (int a = 0; a < 2; a++) {
                uint64_t tag = pt_comm_tag(PT_COMM_USER, (uint32_t)i, 77);
                o->sent[a] += forge(sock[a], (uint32_t)(1 - a), tag, (uint64_t)(1000000 + i), TOKEN,
                                    GEN, big, FLOOD_FLOATS);
            }
        free(big);
    }
    /* the agents' peak memory, read while they still live */
    CHECK_MSG(wait_steps(out, atoi(iters) - 1, &console), "%s: the run did not reach step %d", name,
              atoi(iters) - 1);
    for (int a = 0; a < 2; a++)
        o->hwm_kb[a] = vm_hwm_kb(ag[a]);
    o->status = console.reaped ? console.status : ru_wait(console.pid, ru_budget_ms(RUN_MS), NULL);
    for (int a = 0; a < 2; a++) {
        /* they leave at the console's bye: wait for that, not a fixed time */
        int st = ru_wait(ag[a], ru_budget_ms(RUN_MS), NULL);
        o->dropped[a] = dropped_in_log(log[a], o->line[a], sizeof o->line[a]);
        o->bound[a] = bound_in_log(log[a]);
        zmq_close(sock[a]);
        if (o->status != 0 || st != 0) {
            fprintf(stderr, "%s: console exit %d, agent %d exit %d\n", name, o->status, a, st);
            ru_show_tail("the agent's log", log[a]);
        }
    }
    if (o->status != 0)
        ru_show_tail("the console's stderr", err);
    zmq_ctx_term(ctx);
    unsetenv("PT_RUN_TOKEN");
    unsetenv("PT_COMM_SHM");
}

static void check_same_weights(const char *a, const char *b, const char *iters)
{
    char pa[256], pb[256];
    snprintf(pa, sizeof pa, TDIR "/%s.ck/step-%s", a, iters);
    snprintf(pb, sizeof pb, TDIR "/%s.ck/step-%s", b, iters);
    int tensors = 0;
    double d = ru_ckpt_diff(pa, pb, &tensors);
    CHECK_MSG(d == 0 && tensors > 0, "%s vs %s: weights differ by %g over %d tensors", a, b, d,
              tensors);
}

static void test_forged_frames(void)
{
    ru_fresh_dir(TDIR);
    run_out ref, att;
    run_one("ref", ITERS, 1, ATTACK_NONE, &ref);
    REQUIRE(ref.status == 0);
    CHECK(ref.dropped[0] == -1 && ref.dropped[1] == -1); /* nothing dropped, nothing said */
    for (int shm = 1; shm >= 0; shm--) {
        const char *name = shm ? "forged-shm" : "forged-zmq";
        run_one(name, ITERS, shm, ATTACK_FORGE, &att);
        CHECK_MSG(att.status == 0, "%s: exit %d", name, att.status);
        for (int a = 0; a < 2; a++) {
            CHECK_MSG(att.sent[a] == 16 + REPLAYS, "%s agent %d: %d of %d forged frames sent", name,
                      a, att.sent[a], 16 + REPLAYS);
            CHECK_MSG(att.dropped[a] == att.sent[a], "%s agent %d: %lld dropped of %d sent: %s",
                      name, a, att.dropped[a], att.sent[a], att.line[a]);
            CHECK_MSG(field(att.line[a], "token ") == 4, "%s: %s", name, att.line[a]);
            CHECK_MSG(field(att.line[a], "generation ") == 4, "%s: %s", name, att.line[a]);
            /* replays: dropped for their sequence over ZeroMQ; over shared
             * memory for claiming the sender whose frames come by its ring */
            CHECK_MSG(field(att.line[a], "sender ") == 8 + (shm ? REPLAYS : 0), "%s: %s", name,
                      att.line[a]);
            CHECK_MSG(field(att.line[a], "sequence ") == (shm ? 0 : REPLAYS), "%s: %s", name,
                      att.line[a]);
        }
        check_same_weights(name, "ref", ITERS);
    }
}

static void test_flood(void)
{
    run_out ref, fl;
    mkdir(TDIR, 0700);
    run_one("quiet", FLOOD_ITERS, 1, ATTACK_NONE, &ref);
    REQUIRE(ref.status == 0);
    run_one("flood", FLOOD_ITERS, 1, ATTACK_FLOOD, &fl);
    CHECK_MSG(fl.status == 0, "flood: exit %d", fl.status);
    for (int a = 0; a < 2; a++) {
        CHECK_MSG(fl.sent[a] == FLOOD, "agent %d: %d of %d flood frames sent", a, fl.sent[a],
                  FLOOD);
        /* every flood frame was dropped: over shared memory a ZeroMQ frame
         * from the ring's sender is refused before it is buffered */
        CHECK_MSG(fl.dropped[a] == fl.sent[a], "agent %d: %lld dropped of %d: %s", a, fl.dropped[a],
                  fl.sent[a], fl.line[a]);
        CHECK(fl.bound[a] > 0);
        long long peak = field(fl.line[a], "early-arrival peak ");
        CHECK_MSG(peak >= 0 && peak <= fl.bound[a], "agent %d: %s", a, fl.line[a]);
        CHECK_MSG(fl.hwm_kb[a] > 0 && fl.hwm_kb[a] <= ref.hwm_kb[a] + RSS_MARGIN_KB,
                  "agent %d: peak %ld KiB under the flood, %ld KiB undisturbed", a, fl.hwm_kb[a],
                  ref.hwm_kb[a]);
        printf("flood agent %d: peak %ld KiB (undisturbed %ld KiB), bound %lld bytes, %lld of "
               "%d frames (%d MiB) dropped\n",
               a, fl.hwm_kb[a], ref.hwm_kb[a], fl.bound[a], fl.dropped[a], fl.sent[a],
               (int)((long long)fl.sent[a] * FLOOD_FLOATS * 4 >> 20));
    }
    check_same_weights("flood", "quiet", FLOOD_ITERS);
}

PT_TEST_MAIN({"forged_frames", test_forged_frames}, {"flood", test_flood})
