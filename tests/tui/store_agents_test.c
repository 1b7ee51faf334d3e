/* A run record of many agents reads and replays in time linear in their
 * number (issue 13: 200k agents took over 40 s, every line searching the
 * agent table): every agent is found under its own id with its own row, and
 * ten times the agents cost well under a hundred times the CPU time (the
 * quadratic cost) to replay. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/record.h"
#include "tests/test.h"
#include "tui/record/replay.h"
#include "tui/record/store.h"

#define SMALL       20000
#define LARGE       200000
#define RATIO_BOUND 40.0 /* linear: about 10; quadratic: about 100 */
#define LINE_BYTES  512
#define SESSION_LINE                                                                               \
    "{\"t\":1,\"kind\":\"session\",\"v\":1,\"unix_s\":1795945073,\"control\":"                     \
    "\"tcp://127.0.0.1:1\",\"telemetry\":\"tcp://127.0.0.1:2\",\"heartbeat_ms\":250,"              \
    "\"missed_heartbeats\":8}\n"

/* A record where n agents register, then each changes state once. */
static char *make_record(int n, size_t *len)
{
    size_t cap = (size_t)n * 2 * LINE_BYTES + sizeof SESSION_LINE;
    char *text = malloc(cap), *p = text;
    if (!text)
        return NULL;
    p += sprintf(p, "%s", SESSION_LINE);
    long long t = 10;
    for (int i = 0; i < n; i++) {
        char msg[LINE_BYTES];
        int ml = snprintf(msg, sizeof msg,
                          "{\"v\":1,\"type\":\"register\",\"agent\":\"a%d\",\"seq\":0,\"gen\":0,"
                          "\"host\":\"h\",\"pid\":%d,\"device\":-1,\"device_name\":\"cpu\","
                          "\"backend\":\"cpu\",\"memory_bytes\":1000,\"capabilities\":[\"zmq\"],"
                          "\"data_endpoint\":\"tcp://127.0.0.1:5000\"}",
                          i, 1000 + i);
        p += sprintf(p,
                     "{\"t\":%lld,\"kind\":\"recv\",\"channel\":\"control\",\"offset_ns\":0,"
                     "\"len\":%d,\"msg\":%s}\n",
                     ++t, ml, msg);
    }
    for (int i = 0; i < n; i++)
        p += sprintf(
            p, "{\"t\":%lld,\"kind\":\"agent\",\"agent\":\"a%d\",\"state\":\"idle\",\"step\":%d}\n",
            ++t, i, i % 7);
    *len = (size_t)(p - text);
    return text;
}

/* CPU seconds to parse and replay a record of n agents; checks the rows. */
static double replay_agents(int n)
{
    size_t len = 0;
    char *text = make_record(n, &len);
    if (!text)
        return -1;
    pt_record *rec = NULL;
    pt_store *store = NULL;
    pt_replay *rp = NULL;
    pt_error err = {0};
    clock_t c0 = clock();
    int ok = pt_record_parse(text, len, "agents.ndjson", &rec, &err) == 0 &&
             pt_store_new(0, &store) == 0 && pt_replay_new(rec, store, 1, &rp) == 0;
    if (ok)
        pt_replay_to_end(rp);
    double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
    CHECK_MSG(ok, "%s", err.msg);
    if (ok) {
        CHECK(pt_store_agent_count(store) == n);
        int wrong = 0;
        for (int i = 0; i < n; i += 97) {
            char id[32];
            snprintf(id, sizeof id, "a%d", i);
            int k = pt_store_find_agent(store, id);
            const pt_store_agent *a = pt_store_agent_at(store, k);
            wrong += !a || strcmp(a->id, id) || a->pid != 1000 + i || a->step != i % 7 ||
                     strcmp(a->state, "idle");
        }
        CHECK_MSG(wrong == 0, "%d agents with the wrong row", wrong);
        CHECK(pt_store_find_agent(store, "a-none") == -1);
    }
    pt_replay_free(&rp);
    pt_store_free(&store);
    pt_record_free(&rec);
    free(text);
    return cpu;
}

static void test_linear_in_agents(void)
{
    double small = replay_agents(SMALL);
    double large = replay_agents(LARGE);
    printf("%d agents: %.3f s CPU, %d agents: %.3f s CPU\n", SMALL, small, LARGE, large);
    REQUIRE(small >= 0 && large >= 0);
    double ratio = large / (small > 1e-3 ? small : 1e-3);
    CHECK_MSG(ratio < RATIO_BOUND, "10x the agents took %.1fx the CPU time", ratio);
}

/* A reset forgets the agents, and the index with them. */
static void test_reset(void)
{
    pt_store *s = NULL;
    REQUIRE(pt_store_new(0, &s) == 0);
    pt_store_agent a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < 100; i++) {
        snprintf(a.id, sizeof a.id, "x%d", i);
        a.pid = i;
        CHECK(pt_store_set_agent(s, &a) == 0);
    }
    CHECK(pt_store_find_agent(s, "x57") == 57);
    pt_store_reset(s);
    CHECK(pt_store_agent_count(s) == 0);
    CHECK(pt_store_find_agent(s, "x57") == -1);
    snprintf(a.id, sizeof a.id, "y");
    CHECK(pt_store_set_agent(s, &a) == 0);
    CHECK(pt_store_find_agent(s, "y") == 0 && pt_store_find_agent(s, "x0") == -1);
    pt_store_free(&s);
}

PT_TEST_MAIN({"linear_in_agents", test_linear_in_agents}, {"reset", test_reset})
