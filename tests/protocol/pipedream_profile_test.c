/* PipeDream graph.txt import/export: the shipped graphs import with the layer
 * counts stated, boundary activations match a brute-force reference and hand
 * sums, export -> import gives the profile back, and bad files fail with
 * their messages. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/pipedream_profile.h"
#include "protocol/profile.h"
#include "tests/test.h"

/* The graphs in profiles/pipedream/: node lines, Input nodes, layers (= nodes
 * - inputs) and the batch size each was profiled at (docs/formats.md). */
static const struct shipped {
    const char *name;
    int nodes, inputs, layers, microbatch;
} shipped[] = {
    {"alexnet", 23, 1, 22, 256},
    {"densenet121", 429, 1, 428, 64},
    {"gnmt", 48, 3, 45, 32},
    {"gnmt_large", 96, 3, 93, 128},
    {"inception_v3", 326, 1, 325, 128},
    {"resnet101", 347, 1, 346, 64},
    {"resnet18", 71, 1, 70, 256},
    {"resnet50", 177, 1, 176, 128},
    {"vgg16", 41, 1, 40, 128},
};
#define SHIPPED_COUNT ((int)(sizeof shipped / sizeof shipped[0]))

static int parse_text(const char *text, pt_profile **p, pt_error *err)
{
    return pt_pipedream_parse(text, strlen(text), "test.graph.txt", NULL, p, NULL, err);
}

static int profiles_equal(const pt_profile *a, const pt_profile *b, char *why, size_t cap)
{
    if (a->layer_count != b->layer_count) {
        snprintf(why, cap, "layer counts %d vs %d", a->layer_count, b->layer_count);
        return 0;
    }
    if (a->input_bytes != b->input_bytes || a->microbatch != b->microbatch) {
        snprintf(why, cap, "input bytes or micro-batch differ");
        return 0;
    }
    for (int i = 0; i < a->layer_count; i++) {
        const pt_profile_layer *x = &a->layers[i], *y = &b->layers[i];
        if (strcmp(x->name, y->name) || x->fwd_ms != y->fwd_ms || x->bwd_ms != y->bwd_ms ||
            x->recompute_ms != y->recompute_ms || x->act_bytes != y->act_bytes ||
            x->param_bytes != y->param_bytes) {
            snprintf(why, cap, "layer %d differs ('%s' vs '%s')", i, x->name, y->name);
            return 0;
        }
    }
    return 1;
}

/* ---- a reference reading of a graph, independent of the importer -------- */

#define REF_NODES_MAX 1024
typedef struct ref_graph {
    int n;
    int num[REF_NODES_MAX]; /* K of nodeK */
    int input[REF_NODES_MAX];
    double fwd[REF_NODES_MAX], act[REF_NODES_MAX];
    int ne, from[4 * REF_NODES_MAX], to[4 * REF_NODES_MAX]; /* node numbers */
} ref_graph;

static double field(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    if (!p)
        return -1;
    p += strlen(key);
    if (*p != '[')
        return strtod(p, NULL);
    double sum = 0;
    for (p++; *p && *p != ']'; p++) {
        char *end;
        sum += strtod(p, &end);
        p = strchr(end, ';');
        if (!p)
            break;
    }
    return sum;
}

static int ref_read(const char *path, ref_graph *g)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    static char line[65536];
    g->n = g->ne = 0;
    while (fgets(line, sizeof line, f)) {
        int a, b;
        if (sscanf(line, "\tnode%d -- node%d", &a, &b) == 2) {
            g->from[g->ne] = a;
            g->to[g->ne++] = b;
        } else if (sscanf(line, "node%d", &a) == 1) {
            g->num[g->n] = a;
            g->input[g->n] = strstr(line, " -- Input") == strchr(line, ' ');
            g->fwd[g->n] = field(line, "forward_compute_time=");
            g->act[g->n++] = field(line, "activation_size=");
        }
    }
    fclose(f);
    return 0;
}

/* Boundary after position k by the definition, the slow way: for the graphs
 * whose node numbers are a topological order (checked), position = rank of
 * the node number among the layers. */
static void check_against_reference(const char *path, const pt_profile *p)
{
    static ref_graph g;
    REQUIRE(ref_read(path, &g) == 0);
    for (int e = 0; e < g.ne; e++)
        REQUIRE(g.from[e] < g.to[e]); /* numbering is topological */
    static int pos_of_num[100000];
    int layers = 0, max_num = 0;
    double fwd_total = 0;
    for (int i = 0; i < g.n; i++)
        if (g.num[i] > max_num)
            max_num = g.num[i];
    REQUIRE(max_num < 100000);
    for (int k = 0; k <= max_num; k++)
        pos_of_num[k] = -2; /* not a node */
    for (int i = 0; i < g.n; i++)
        pos_of_num[g.num[i]] = g.input[i] ? -1 : 0;
    for (int k = 0; k <= max_num; k++)
        if (pos_of_num[k] == 0)
            pos_of_num[k] = layers++;
    REQUIRE(layers == p->layer_count);
    for (int i = 0; i < g.n; i++)
        if (!g.input[i])
            fwd_total += g.fwd[i];
    double prof_fwd = 0;
    for (int i = 0; i < p->layer_count; i++)
        prof_fwd += p->layers[i].fwd_ms;
    CHECK_NEAR(prof_fwd, fwd_total, 1e-9 * (1 + fwd_total));
    int bad = 0;
    for (int k = 0; k + 1 < layers; k++) {
        double cross = 0;
        for (int i = 0; i < g.n; i++) {
            int pu = pos_of_num[g.num[i]];
            if (pu < 0 || pu > k)
                continue;
            for (int e = 0; e < g.ne; e++)
                if (g.from[e] == g.num[i] && pos_of_num[g.to[e]] > k) {
                    cross += g.act[i];
                    break;
                }
        }
        if ((double)p->layers[k].act_bytes != cross && bad++ < 3)
            fprintf(stderr, "%s: boundary after %d: %lld vs reference %.0f\n", path, k,
                    (long long)p->layers[k].act_bytes, cross);
    }
    CHECK(bad == 0);
    /* The last layer keeps its own activation size. */
    for (int i = 0; i < g.n; i++)
        if (pos_of_num[g.num[i]] == layers - 1)
            CHECK((double)p->layers[layers - 1].act_bytes == g.act[i]);
}

static void test_shipped_graphs(void)
{
    for (int s = 0; s < SHIPPED_COUNT; s++) {
        char rel[256];
        snprintf(rel, sizeof rel, "profiles/pipedream/%s.graph.txt", shipped[s].name);
        const char *path = pt_test_path(rel);
        pt_profile *p = NULL;
        pt_pipedream_stats st = {0};
        pt_error err = {0};
        int rc = pt_pipedream_load(path, NULL, &p, &st, &err);
        CHECK_MSG(rc == 0, "%s: %s", path, err.msg);
        if (rc < 0)
            continue;
        CHECK_MSG(p->layer_count == shipped[s].layers, "%s: %d layers", path, p->layer_count);
        CHECK(st.nodes == shipped[s].nodes);
        CHECK(st.inputs == shipped[s].inputs);
        CHECK(!strcmp(p->model, shipped[s].name));
        CHECK(!strcmp(p->source, "imported"));
        CHECK(p->microbatch == 1); /* the file does not say */
        CHECK(!p->roofline.has);   /* no device named: nothing to floor by */
        check_against_reference(path, p);
        pt_profile_free(&p);
    }
}

/* The import named a device description (devices/pipedream-gpu.json), so
 * both carry its roofline: V100 figures, each layer's weights read once
 * (none for an embedding, which gathers rows) and one kernel when it has
 * forward time. */
static void check_roofline(const pt_profile *fresh, const pt_profile *committed, const char *path)
{
    const pt_profile_roofline *a = &fresh->roofline, *b = &committed->roofline;
    CHECK_MSG(a->has && b->has, "%s: no roofline", path);
    CHECK(a->peak_flops == b->peak_flops && a->mem_bandwidth == b->mem_bandwidth &&
          a->launch_us == b->launch_us);
    CHECK(b->peak_flops == 15.7e12 && b->mem_bandwidth == 900e9 && b->launch_us == 1);
    for (int i = 0; i < fresh->layer_count && i < committed->layer_count; i++) {
        const pt_profile_layer *x = &fresh->layers[i], *y = &committed->layers[i];
        int embedding = !strncmp(y->name, "Embedding(", 10);
        CHECK_MSG(x->weight_bytes == y->weight_bytes && x->kernels == y->kernels &&
                      y->weight_bytes == (embedding ? 0 : y->param_bytes) &&
                      y->kernels == (y->fwd_ms > 0) && y->flops == 0 && y->bytes == 0,
                  "%s: layers[%d] roofline fields", path, i);
    }
}

/* profiles/<name>.json must be what import-profile makes of the graph today. */
static void test_committed_json_is_current(void)
{
    for (int s = 0; s < SHIPPED_COUNT; s++) {
        char rel[256];
        snprintf(rel, sizeof rel, "profiles/pipedream/%s.graph.txt", shipped[s].name);
        const char *gpath = pt_test_path(rel);
        snprintf(rel, sizeof rel, "profiles/%s.json", shipped[s].name);
        const char *jpath = pt_test_path(rel);
        pt_pipedream_options opt = {.microbatch = shipped[s].microbatch, .device = "pipedream-gpu"};
        pt_profile *fresh = NULL, *committed = NULL;
        pt_error err = {0};
        int rc = pt_pipedream_load(gpath, &opt, &fresh, NULL, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        rc = rc ? rc : pt_profile_load(jpath, &committed, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc == 0) {
            char why[256] = "";
            CHECK_MSG(profiles_equal(fresh, committed, why, sizeof why), "%s: %s", jpath, why);
            CHECK(!strcmp(committed->model, shipped[s].name));
            CHECK(!strcmp(committed->device, "pipedream-gpu"));
            check_roofline(fresh, committed, jpath);
        }
        pt_profile_free(&fresh);
        pt_profile_free(&committed);
    }
}

#define IN        "forward_compute_time=0.0, backward_compute_time=0.0, activation_size="
#define META(act) "forward_compute_time=1.5, backward_compute_time=2.5, activation_size=" act

/* Input -> A; A -> B, A -> C; B -> D, C -> D. Positions A0 B1 C2 D3.
 * After A: A (consumed by B, C) = 10. After B: A (by C) + B (by D) = 30.
 * After C: B + C (by D) = 50. D is last: its own 40. */
static void test_diamond(void)
{
    const char *text =
        "node1 -- Input0 -- " IN "100.0, parameter_size=0.0\n"
        "node2 -- A -- " META(
            "10.0") ", parameter_size=5.0\n"
                    "node3 -- B -- " META(
                        "20.0") ", parameter_size=0.0\n"
                                "node4 -- C -- " META(
                                    "30.0") ", parameter_size=7.0\n"
                                            "node5 -- D -- " META(
                                                "40.0") ", parameter_size=0.0\n"
                                                        "\tnode1 -- node2\n\tnode2 -- "
                                                        "node3\n\tnode2 -- node4\n"
                                                        "\tnode3 -- node5\n\tnode4 -- node5\n";
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(parse_text(text, &p, &err) == 0);
    REQUIRE(p->layer_count == 4);
    CHECK(p->input_bytes == 100);
    const char *names[] = {"A", "B", "C", "D"};
    const int64_t act[] = {10, 30, 50, 40}, param[] = {5, 0, 7, 0};
    for (int i = 0; i < 4; i++) {
        CHECK(!strcmp(p->layers[i].name, names[i]));
        CHECK(p->layers[i].act_bytes == act[i]);
        CHECK(p->layers[i].param_bytes == param[i]);
        CHECK(p->layers[i].fwd_ms == 1.5 && p->layers[i].bwd_ms == 2.5);
        CHECK(p->layers[i].recompute_ms == 1.5);
    }
    pt_profile_free(&p);
}

/* A residual block: A -> B -> C -> D with a skip A -> D, written in a
 * scrambled line order. After A: 10. After B: A (skip) + B = 30.
 * After C: A (skip) + C = 40. D last: 7. Two inputs: 3 + 5 bytes. */
static void test_skip_connection(void)
{
    const char *text =
        "\tnode3 -- node4\n"
        "node5 -- Add -- " META(
            "7.0") ", parameter_size=0.0\n"
                   "node3 -- B -- " META(
                       "20.0") ", parameter_size=0.0\n"
                               "node1 -- Input0 -- " IN "3.0, parameter_size=0.0\n"
                               "node4 -- C -- " META(
                                   "30.0") ", parameter_size=0.0\n"
                                           "node2 -- A -- " META(
                                               "10.0") ", parameter_size=0.0 -- stage_id=0\n"
                                                       "node6 -- Input1 -- " IN
                                                       "5.0, parameter_size=0.0\n"
                                                       "\tnode1 -- node2\n\tnode2 -- node3\n"
                                                       "\tnode4 -- node5\n\tnode2 -- "
                                                       "node5\n\tnode6 -- node3\n";
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(parse_text(text, &p, &err) == 0);
    REQUIRE(p->layer_count == 4);
    CHECK(p->input_bytes == 8);
    const char *names[] = {"A", "B", "C", "Add"};
    const int64_t act[] = {10, 30, 40, 7};
    for (int i = 0; i < 4; i++) {
        CHECK(!strcmp(p->layers[i].name, names[i]));
        CHECK(p->layers[i].act_bytes == act[i]);
    }
    pt_profile_free(&p);
}

/* Ties go by the id's number, but edges win over numbers; an "Input" node
 * that is fed by another node is a layer; output lists are summed. */
static void test_order_and_details(void)
{
    const char *text =
        "node1 -- Input -- " IN "4.0, parameter_size=0.0\n"
        "node9 -- First -- " META("[3.0; 4.5]") ", parameter_size=0.0\n"
                                                "node2 -- Second -- " META(
                                                    "2.0") ", parameter_size=0.0\n"
                                                           "node3 -- Input2 -- " META(
                                                               "6.0") ", parameter_size=0.0\n"
                                                                      "\tnode1 -- node9\n\tnode9 "
                                                                      "-- node2\n\tnode9 -- node2\n"
                                                                      "\tnode2 -- node3\n";
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(parse_text(text, &p, &err) == 0);
    REQUIRE(p->layer_count == 3);
    CHECK(!strcmp(p->layers[0].name, "First"));
    CHECK(!strcmp(p->layers[1].name, "Second"));
    CHECK(!strcmp(p->layers[2].name, "Input2"));
    CHECK(p->layers[0].act_bytes == 8); /* 7.5 bytes, rounded */
    CHECK(p->layers[2].act_bytes == 6);
    CHECK(p->input_bytes == 4);
    pt_profile_free(&p);

    /* Unconnected sources order by number: node2 before node10. */
    const char *two =
        "node10 -- Ten -- " META("1.0") ", parameter_size=0.0\n"
                                        "node2 -- Two -- " META("1.0") ", parameter_size=0.0\n";
    REQUIRE(parse_text(two, &p, &err) == 0);
    CHECK(!strcmp(p->layers[0].name, "Two") && !strcmp(p->layers[1].name, "Ten"));
    CHECK(p->input_bytes == 0);
    CHECK(p->layers[0].act_bytes == 0); /* nothing consumes it */
    pt_profile_free(&p);
}

static void test_options(void)
{
    const char *text = "node1 -- L -- " META("1.0") ", parameter_size=0.0\n";
    pt_pipedream_options opt = {.microbatch = 48, .model = "m", .device = "d"};
    pt_profile *p = NULL;
    pt_error err = {0};
    REQUIRE(pt_pipedream_parse(text, strlen(text), "x", &opt, &p, NULL, &err) == 0);
    CHECK(p->microbatch == 48);
    CHECK(!strcmp(p->model, "m") && !strcmp(p->device, "d"));
    pt_profile_free(&p);
    REQUIRE(parse_text(text, &p, &err) == 0);
    CHECK(p->microbatch == 1 && !strcmp(p->model, "imported") && !strcmp(p->device, "unknown"));
    pt_profile_free(&p);
}

static pt_profile *roundtrip(const pt_profile *p, const pt_pipedream_options *opt, pt_error *err)
{
    char *text = pt_pipedream_to_text(p);
    if (!text)
        return NULL;
    pt_profile *q = NULL;
    if (pt_pipedream_parse(text, strlen(text), "exported", opt, &q, NULL, err) < 0)
        fprintf(stderr, "re-import failed: %s\n--\n%s--\n", err->msg, text);
    free(text);
    return q;
}

static void test_roundtrip_shipped(void)
{
    for (int s = 0; s < SHIPPED_COUNT; s++) {
        char rel[256];
        snprintf(rel, sizeof rel, "profiles/pipedream/%s.graph.txt", shipped[s].name);
        pt_pipedream_options opt = {.microbatch = shipped[s].microbatch};
        pt_profile *p = NULL;
        pt_error err = {0};
        REQUIRE(pt_pipedream_load(pt_test_path(rel), &opt, &p, NULL, &err) == 0);
        pt_profile *q = roundtrip(p, &opt, &err);
        char why[256] = "";
        CHECK_MSG(q && profiles_equal(p, q, why, sizeof why), "%s: %s", rel, why);
        pt_profile_free(&p);
        pt_profile_free(&q);
    }
}

/* Names and figures chosen to trip a careless writer. */
static void test_roundtrip_tricky(void)
{
    static const char *names[] = {"Input",
                                  "Input0",
                                  "-x",
                                  "x-",
                                  "a--b",
                                  "---",
                                  "a - b",
                                  "=,;[]",
                                  " lead",
                                  "tail ",
                                  "node7",
                                  "ReLU(inplace)",
                                  ("a123456789b123456789c123456789d123456789e1234567"
                                   "89f123456789z")};
    const int n = (int)(sizeof names / sizeof names[0]);
    pt_profile *p = pt_profile_new(n);
    REQUIRE(p);
    p->microbatch = 3;
    p->input_bytes = 9007199254740991LL; /* 2^53 - 1 */
    for (int i = 0; i < n; i++) {
        snprintf(p->layers[i].name, sizeof p->layers[i].name, "%s", names[i]);
        p->layers[i].fwd_ms = i == 0 ? 0.0 : 0.1 * i + 1e-7 / i;
        p->layers[i].bwd_ms = 123456.789 / (i + 1);
        p->layers[i].recompute_ms = p->layers[i].fwd_ms;
        p->layers[i].act_bytes = (int64_t)1 << (i + 20);
        p->layers[i].param_bytes = i * 1000003LL;
    }
    pt_pipedream_options opt = {.microbatch = 3};
    pt_error err = {0};
    pt_profile *q = roundtrip(p, &opt, &err);
    char why[256] = "";
    CHECK_MSG(q && profiles_equal(p, q, why, sizeof why), "%s", why);
    pt_profile_free(&q);

    /* Names the format cannot carry still give a file that reads back. */
    snprintf(p->layers[1].name, sizeof p->layers[1].name, "a -- b");
    snprintf(p->layers[2].name, sizeof p->layers[2].name, "x --");
    snprintf(p->layers[3].name, sizeof p->layers[3].name, "-- y");
    snprintf(p->layers[4].name, sizeof p->layers[4].name, "tab\there\nnewline");
    p->layers[5].name[0] = '\0';
    q = roundtrip(p, &opt, &err);
    REQUIRE(q);
    CHECK(q->layer_count == n);
    CHECK(!strcmp(q->layers[1].name, "a -  b"));
    CHECK(!strcmp(q->layers[2].name, "x - "));
    CHECK(!strcmp(q->layers[3].name, "-  y"));
    CHECK(!strcmp(q->layers[4].name, "tab here newline"));
    CHECK(!strcmp(q->layers[5].name, "layer5"));
    for (int i = 0; i < n; i++)
        CHECK(q->layers[i].act_bytes == p->layers[i].act_bytes);
    pt_profile_free(&q);
    pt_profile_free(&p);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static void test_bad_files(void)
{
    const char *dir = pt_test_path("tests/data/bad/pipedream");
    DIR *d = opendir(dir);
    REQUIRE(d);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!ends_with(e->d_name, ".graph.txt"))
            continue;
        char path[1024], epath[1100];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(epath, sizeof epath, "%s", path);
        strcpy(epath + strlen(epath) - strlen(".graph.txt"), ".expect");
        char *expect = NULL;
        size_t len = 0;
        pt_error err = {0};
        CHECK_MSG(pt_file_read(epath, &expect, &len, &err) == 0, "%s has no .expect", path);
        if (!expect)
            continue;
        while (len > 0 && (expect[len - 1] == '\n' || expect[len - 1] == '\r'))
            expect[--len] = '\0';
        CHECK(len > 0);
        pt_profile *p = (pt_profile *)1;
        int rc = pt_pipedream_load(path, NULL, &p, NULL, &err);
        CHECK_MSG(rc < 0 && p == NULL, "%s was accepted", path);
        CHECK(err.code == rc);
        CHECK_STR_CONTAINS(err.msg, expect);
        /* The message starts with the path ("path: ..." or "path:LINE: ..."). */
        CHECK_MSG(!strncmp(err.msg, path, strlen(path)) && err.msg[strlen(path)] == ':',
                  "\"%s\" does not start with the path", err.msg);
        pt_profile_free(&p);
        free(expect);
        count++;
    }
    closedir(d);
    CHECK(count >= 20);
}

/* Every prefix of a valid file either parses or fails with a message that
 * names the file; none crashes (ASan watches). */
static void test_truncations(void)
{
    char *text = NULL;
    size_t len = 0;
    pt_error err = {0};
    REQUIRE(pt_file_read(pt_test_path("profiles/pipedream/alexnet.graph.txt"), &text, &len, &err) ==
            0);
    for (size_t cut = 0; cut < len; cut += 7) {
        pt_profile *p = NULL;
        int rc = pt_pipedream_parse(text, cut, "cut.graph.txt", NULL, &p, NULL, &err);
        if (rc < 0)
            CHECK_STR_CONTAINS(err.msg, "cut.graph.txt");
        else
            CHECK(p && p->layer_count > 0);
        pt_profile_free(&p);
    }
    free(text);
}

PT_TEST_MAIN({"shipped_graphs", test_shipped_graphs},
             {"committed_json_is_current", test_committed_json_is_current},
             {"diamond", test_diamond}, {"skip_connection", test_skip_connection},
             {"order_and_details", test_order_and_details}, {"options", test_options},
             {"roundtrip_shipped", test_roundtrip_shipped},
             {"roundtrip_tricky", test_roundtrip_tricky}, {"bad_files", test_bad_files},
             {"truncations", test_truncations})
