/* Interleaved 1F1B (Megatron-LM) run by the stage executor: every device holds
 * v model chunks (device d: chunks d, d+S, ...), each chunk its own executor,
 * the chunks of a device taking turns in the host order of the program
 * (runtime/exec_host.h). After K iterations the weights equal single-device
 * training on the same global batches within 1e-5, for v = 2 and v = 3, on the
 * MLP and on the GPT-style model, with a replicated rank in one case; and the
 * ops of every device ran one at a time in exactly the schedule's interleaved
 * order. */
#include "tests/runtime/exec_common.h"

#define ITERS 3

/* The ops of each host's workers, sorted by start time, are its host order:
 * the device ran its chunks one op at a time, as scheduled. */
static void ran_in_host_order(const ec_case *c, const ec_run *r, const ec_weights *want, int before)
{
    (void)want, (void)before;
    const pt_program *p = &r->prog;
    REQUIRE(p->host_count > 0);
    for (int h = 0; h < p->host_count; h++) {
        int len = pt_sched_host_len(p, h), pos[EC_MAX_WORKERS] = {0}, ok = 1;
        int64_t last_end = 0;
        for (int k = 0; k < len && ok; k++) {
            /* the earliest-starting op not yet consumed among the host's workers */
            int best = -1;
            for (int w = 0; w < p->worker_count; w++) {
                if (p->worker_host[w] != h || pos[w] >= r->events->n[w])
                    continue;
                if (best < 0 ||
                    r->events->ev[w][pos[w]].start_ns < r->events->ev[best][pos[best]].start_ns)
                    best = w;
            }
            REQUIRE(best >= 0);
            const pt_exec_event *ev = &r->events->ev[best][pos[best]++];
            ok = ev->op_index == pt_sched_host_op(p, h, k) && ev->start_ns >= last_end;
            CHECK_MSG(ok,
                      "%s: host %d op %d of its order: ran op %d (want %d), start %lld after "
                      "the previous end %lld",
                      c->name, h, k, ev->op_index, pt_sched_host_op(p, h, k),
                      (long long)ev->start_ns, (long long)last_end);
            last_end = ev->end_ns;
        }
    }
}

static void run_layout(const char *name, const int *cuts, int ranks, int v, const int *reps, int b,
                       int M, int gpt, int host_comm);

/* Each case twice: every chunk its own data-plane rank (an agent per chunk),
 * then one rank per device that all its chunks share (one agent per device:
 * chunks of a device exchange with the same peer ranks, so their messages and
 * all-reduces are told apart by chunk, runtime/exec_host.h). */
static void run(const char *name, const int *cuts, int ranks, int v, const int *reps, int b, int M,
                int gpt)
{
    for (int hc = 0; hc <= 1; hc++) {
        char label[128];
        snprintf(label, sizeof label, "%s, %s", name,
                 hc ? "one rank per device" : "one rank per chunk");
        run_layout(label, cuts, ranks, v, reps, b, M, gpt, hc);
    }
}

static void run_layout(const char *name, const int *cuts, int ranks, int v, const int *reps, int b,
                       int M, int gpt, int host_comm)
{
    ec_case c = {.name = name,
                 .kind = PT_SCHED_INTERLEAVED,
                 .stages = ranks * v,
                 .cuts = cuts,
                 .replicas = reps,
                 .mb_size = b,
                 .mb_count = M,
                 .optim = PT_OPTIM_SGD,
                 .gpt = gpt,
                 .chunks = v,
                 .host_comm = host_comm};
    ec_check_sync(&c, ITERS, ran_in_host_order);
}

static void test_mlp(void)
{
    static const int cuts_2x2[] = {0, 2, 4, 6, 8};
    static const int cuts_2x3[] = {0, 1, 2, 4, 5, 6, 8};
    static const int cuts_3x2[] = {0, 1, 2, 4, 5, 6, 8};
    run("interleaved v=2 S=2 M=4", cuts_2x2, 2, 2, NULL, 4, 4, 0);
    run("interleaved v=3 S=2 M=4", cuts_2x3, 2, 3, NULL, 4, 4, 0);
    run("interleaved v=2 S=3 M=6", cuts_3x2, 3, 2, NULL, 2, 6, 0);
}

static void test_replicated(void)
{
    static const int cuts_2x2[] = {0, 2, 4, 6, 8};
    static const int cuts_2x3[] = {0, 1, 2, 4, 5, 6, 8};
    static const int first2[] = {2, 1};
    static const int last2[] = {1, 2};
    run("interleaved v=2 S=2 rank 0 x2", cuts_2x2, 2, 2, first2, 4, 4, 0);
    run("interleaved v=3 S=2 rank 1 x2", cuts_2x3, 2, 3, last2, 4, 2, 0);
}

static void test_gpt(void)
{
    /* 6 layers: embedding | attention block | MLP block | norm | head | loss */
    static const int cuts_2x2[] = {0, 1, 3, 4, 6};
    static const int cuts_2x3[] = {0, 1, 2, 3, 4, 5, 6};
    static const int last2[] = {1, 2};
    run("interleaved gpt v=2 S=2 M=4", cuts_2x2, 2, 2, NULL, 4, 4, 1);
    run("interleaved gpt v=3 S=2 M=2 rank 1 x2", cuts_2x3, 2, 3, last2, 4, 2, 1);
}

PT_TEST_MAIN({"mlp", test_mlp}, {"replicated", test_replicated}, {"gpt", test_gpt})
