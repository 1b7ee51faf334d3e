/* Topology: unit conversions, the compact and repeat forms, links between
 * devices, round-trips (shipped files, uniform, random), and that every
 * shipped topology parses. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "protocol/topology.h"
#include "tests/test.h"

static const char *example =
    "{\"v\":1,\"name\":\"mixed\",\"nodes\":["
    "{\"name\":\"a\",\"devices\":[{\"name\":\"gpu0\",\"memory_gib\":32,\"speed\":1.0},"
    "{\"memory_gib\":0.5,\"speed\":2.5}]},"
    "{\"count\":3,\"device\":{\"name\":\"v\",\"memory_gib\":16}},"
    "{\"name\":\"rack\",\"repeat\":2,\"count\":2,\"device\":{\"memory_gib\":1}}],"
    "\"links\":{\"intra\":{\"bandwidth_gbps\":1200,\"latency_us\":5},"
    "\"inter\":{\"bandwidth_gbps\":100,\"latency_us\":10}}}";

static int topo_equal(const pt_topology *a, const pt_topology *b)
{
    if (strcmp(a->name, b->name) || a->node_count != b->node_count ||
        a->device_count != b->device_count)
        return 0;
    for (int i = 0; i < a->device_count; i++) {
        const pt_device *x = &a->devices[i], *y = &b->devices[i];
        if (strcmp(x->name, y->name) || x->node != y->node || x->memory_bytes != y->memory_bytes ||
            x->speed != y->speed || x->node_cores != y->node_cores ||
            strcmp(x->compute, y->compute) || strcmp(x->precision, y->precision))
            return 0;
    }
    for (int i = 0; i < a->node_count; i++)
        if (a->node_names && b->node_names && strcmp(a->node_names[i], b->node_names[i]))
            return 0;
    return a->intra.bandwidth == b->intra.bandwidth && a->intra.latency == b->intra.latency &&
           a->inter.bandwidth == b->inter.bandwidth && a->inter.latency == b->inter.latency;
}

/* Bandwidth and latency round-trip to within the unit conversion. */
static int links_near(const pt_topology *a, const pt_topology *b)
{
    const double rel = 1e-15;
    return fabs(a->intra.bandwidth - b->intra.bandwidth) <= rel * a->intra.bandwidth &&
           fabs(a->inter.bandwidth - b->inter.bandwidth) <= rel * a->inter.bandwidth &&
           fabs(a->intra.latency - b->intra.latency) <= rel * a->intra.latency &&
           fabs(a->inter.latency - b->inter.latency) <= rel * a->inter.latency;
}

static pt_topology *parse_json(const char *json)
{
    pt_topology *t = NULL;
    pt_error err = {0};
    int rc = json ? pt_topology_parse(json, "round-trip", &t, &err) : PT_ENOMEM;
    CHECK_MSG(rc == 0, "%s", err.msg);
    return t;
}

/* parse(to_json(t)); checks too that the writer is a fixed point on records
 * read from JSON: to_json(parse(to_json(back))) == to_json(back). */
static pt_topology *round_trip(const pt_topology *t)
{
    char *json = pt_topology_to_json(t);
    pt_topology *back = parse_json(json);
    free(json);
    if (!back)
        return NULL;
    char *json2 = pt_topology_to_json(back);
    pt_topology *back2 = parse_json(json2);
    char *json3 = pt_topology_to_json(back2);
    CHECK(json2 && json3 && !strcmp(json2, json3));
    free(json2);
    free(json3);
    pt_topology_free(&back2);
    return back;
}

static void test_example(void)
{
    pt_topology *t = NULL;
    pt_error err = {0};
    REQUIRE(pt_topology_parse(example, "t.json", &t, &err) == 0);
    CHECK(!strcmp(t->name, "mixed"));
    REQUIRE(t->node_count == 4 && t->device_count == 2 + 3 + 2 * 2);
    CHECK(!strcmp(t->node_names[0], "a") && !strcmp(t->node_names[1], "n1") &&
          !strcmp(t->node_names[2], "rack0") && !strcmp(t->node_names[3], "rack1"));
    /* names: given, default by position, numbered from a template */
    CHECK(!strcmp(t->devices[0].name, "gpu0") && !strcmp(t->devices[1].name, "dev1"));
    CHECK(!strcmp(t->devices[2].name, "v0") && !strcmp(t->devices[4].name, "v2"));
    CHECK(!strcmp(t->devices[5].name, "dev0") && !strcmp(t->devices[8].name, "dev1"));
    const int nodes[] = {0, 0, 1, 1, 1, 2, 2, 3, 3};
    for (int i = 0; i < 9; i++)
        CHECK(t->devices[i].node == nodes[i]);
    /* units: GiB -> bytes, default speed 1 */
    CHECK(t->devices[0].memory_bytes == 32LL << 30);
    CHECK(t->devices[1].memory_bytes == 1LL << 29 && t->devices[1].speed == 2.5);
    CHECK(t->devices[3].memory_bytes == 16LL << 30 && t->devices[3].speed == 1.0);
    /* Gbit/s -> bytes/s, us -> s */
    CHECK_NEAR(t->intra.bandwidth, 1200e9 / 8, 0);
    CHECK_NEAR(t->inter.bandwidth, 100e9 / 8, 0);
    CHECK_NEAR(t->intra.latency, 5e-6, 1e-21);
    CHECK_NEAR(t->inter.latency, 10e-6, 1e-21);
    /* links between devices */
    pt_link l = pt_topology_link(t, 0, 1);
    CHECK(l.bandwidth == t->intra.bandwidth);
    l = pt_topology_link(t, 1, 2);
    CHECK(l.bandwidth == t->inter.bandwidth);
    l = pt_topology_link(t, 5, 6);
    CHECK(l.bandwidth == t->intra.bandwidth);
    l = pt_topology_link(t, 6, 7); /* rack0 -> rack1: two nodes made by one entry */
    CHECK(l.bandwidth == t->inter.bandwidth);
    pt_topology *back = round_trip(t);
    CHECK(back && topo_equal(t, back));
    pt_topology_free(&back);
    pt_topology_free(&t);
    CHECK(t == NULL);
}

static void test_single_node_inter_defaults_to_intra(void)
{
    const char *json = "{\"v\":1,\"name\":\"one\",\"nodes\":[{\"count\":2,\"device\":"
                       "{\"memory_gib\":4}}],\"links\":{\"intra\":{\"bandwidth_gbps\":40,"
                       "\"latency_us\":20}}}";
    pt_topology *t = NULL;
    pt_error err = {0};
    REQUIRE(pt_topology_parse(json, "one", &t, &err) == 0);
    CHECK(t->inter.bandwidth == t->intra.bandwidth && t->inter.latency == t->intra.latency);
    CHECK_NEAR(t->intra.bandwidth, 5e9, 0);
    pt_topology_free(&t);
}

static void test_shipped(void)
{
    const char *dir = pt_test_path("topologies");
    DIR *d = opendir(dir);
    REQUIRE(d != NULL);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json"))
            continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        pt_topology *t = NULL;
        pt_error err = {0};
        CHECK_MSG(pt_topology_load(path, &t, &err) == 0, "%s", err.msg);
        if (!t)
            continue;
        files++;
        pt_topology *back = round_trip(t);
        CHECK_MSG(back && topo_equal(t, back), "%s does not round-trip", e->d_name);
        pt_topology_free(&back);
        pt_topology_free(&t);
    }
    closedir(d);
    CHECK(files >= 5);
}

static pt_topology *load(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "topologies/%s.json", name);
    pt_topology *t = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_topology_load(pt_test_path(rel), &t, &err) == 0, "%s", err.msg);
    return t;
}

static void test_shipped_figures(void)
{
    pt_topology *t = load("cluster-128x8");
    REQUIRE(t != NULL);
    CHECK(t->node_count == 128 && t->device_count == 1024);
    for (int i = 0; i < 1024; i++) {
        CHECK(t->devices[i].node == i / 8);
        CHECK(t->devices[i].memory_bytes == 80LL << 30);
    }
    CHECK(!strcmp(t->node_names[127], "node127") && !strcmp(t->devices[1023].name, "gpu7"));
    CHECK(pt_topology_link(t, 7, 8).bandwidth == t->inter.bandwidth);
    pt_topology_free(&t);

    t = load("dgx1-v100-x8");
    REQUIRE(t != NULL);
    CHECK(t->node_count == 8 && t->device_count == 64);
    CHECK(t->devices[0].memory_bytes == 32LL << 30);
    CHECK_NEAR(t->intra.bandwidth, 150e9, 0);  /* 1200 Gbit/s */
    CHECK_NEAR(t->inter.bandwidth, 12.5e9, 0); /* 100 Gbit/s */
    pt_topology_free(&t);

    t = load("pipedream-cluster-a");
    REQUIRE(t != NULL);
    CHECK(t->node_count == 4 && t->device_count == 16);
    CHECK(t->devices[0].memory_bytes == 12LL << 30);
    CHECK_NEAR(t->intra.bandwidth, 10e9, 0); /* PCIe 10 GB/s */
    CHECK_NEAR(t->inter.bandwidth, 25e9 / 8, 0);
    pt_topology_free(&t);

    t = load("pipedream-cluster-b");
    REQUIRE(t != NULL);
    CHECK(t->node_count == 4 && t->device_count == 32);
    CHECK(t->devices[31].memory_bytes == 16LL << 30);
    CHECK_NEAR(t->inter.bandwidth, 10e9 / 8, 0);
    pt_topology_free(&t);

    t = load("local-cpu-4");
    REQUIRE(t != NULL);
    CHECK(t->node_count == 1 && t->device_count == 4);
    CHECK(t->devices[0].memory_bytes == 4LL << 30);
    CHECK_NEAR(t->intra.latency, 20e-6, 1e-20);
    pt_topology_free(&t);
}

static void test_uniform(void)
{
    pt_link intra = {3e10, 2e-6}, inter = {1.25e9, 1.5e-5};
    pt_topology *t = pt_topology_uniform(3, 4, 8LL << 30, intra, inter);
    REQUIRE(t != NULL);
    CHECK(t->node_count == 3 && t->device_count == 12);
    CHECK(t->devices[11].node == 2 && t->devices[11].memory_bytes == 8LL << 30);
    CHECK(t->devices[5].speed == 1.0);
    CHECK(pt_topology_link(t, 0, 3).bandwidth == 3e10);
    CHECK(pt_topology_link(t, 3, 4).latency == 1.5e-5);
    pt_topology *back = round_trip(t);
    CHECK(back && topo_equal(t, back));
    pt_topology_free(&back);
    pt_topology_free(&t);
    CHECK(pt_topology_uniform(0, 4, 1, intra, inter) == NULL);
    CHECK(pt_topology_uniform(4096, 4096, 1, intra, inter) == NULL);
}

/* Random hand-built topologies: everything but the converted link figures
 * round-trips exactly; those within 1e-15. */
static void test_round_trip_random(void)
{
    unsigned seed = 7;
    for (int trial = 0; trial < 40; trial++) {
        int nodes = 1 + rand_r(&seed) % 5, per = 1 + rand_r(&seed) % 4;
        pt_link intra = {1e6 + rand_r(&seed), (double)rand_r(&seed) / RAND_MAX * 1e-3};
        pt_link inter = {1e3 + rand_r(&seed) / 7.0, (double)rand_r(&seed) / RAND_MAX};
        pt_topology *t = pt_topology_uniform(nodes, per, 1, intra, inter);
        REQUIRE(t != NULL);
        t->node_names[0][0] = '\0'; /* an unnamed node reads back as n0 */
        for (int i = 0; i < t->device_count; i++) {
            t->devices[i].memory_bytes = 1 + (((int64_t)rand_r(&seed) << 16) ^ rand_r(&seed));
            t->devices[i].speed = 0.01 + (double)rand_r(&seed) / RAND_MAX;
            if (rand_r(&seed) % 3 == 0)
                snprintf(t->devices[i].name, PT_NAME_MAX, "custom-%d", i);
        }
        /* some nodes share cores among their devices (every device of a node alike) */
        for (int n = 0; n < nodes; n++) {
            int cores = rand_r(&seed) % 2 ? 1 + rand_r(&seed) % 64 : 0;
            for (int j = 0; j < per; j++)
                t->devices[n * per + j].node_cores = cores;
        }
        pt_topology *back = round_trip(t);
        REQUIRE(back != NULL);
        CHECK(!strcmp(back->node_names[0], "n0"));
        snprintf(t->node_names[0], PT_NAME_MAX, "n0");
        pt_link bi = back->intra, be = back->inter;
        CHECK(links_near(t, back));
        back->intra = t->intra;
        back->inter = t->inter;
        CHECK(topo_equal(t, back));
        back->intra = bi;
        back->inter = be;
        /* a record read from JSON round-trips exactly, links included */
        pt_topology *again = round_trip(back);
        CHECK(again && topo_equal(back, again));
        pt_topology_free(&again);
        pt_topology_free(&back);
        pt_topology_free(&t);
    }
}

/* "cores": a node's devices share that many cores; the simulator's slowdown. */
static void test_shared_cores(void)
{
    const char *json = "{\"v\":1,\"name\":\"host\",\"nodes\":["
                       "{\"name\":\"box\",\"cores\":2,\"count\":4,"
                       "\"device\":{\"name\":\"cpu\",\"memory_gib\":1}},"
                       "{\"repeat\":2,\"cores\":3,\"count\":1,\"device\":{\"memory_gib\":1}},"
                       "{\"count\":2,\"device\":{\"memory_gib\":1}}],"
                       "\"links\":{\"intra\":{\"bandwidth_gbps\":40,\"latency_us\":20},"
                       "\"inter\":{\"bandwidth_gbps\":10,\"latency_us\":50}}}";
    pt_topology *t = NULL;
    pt_error err = {0};
    REQUIRE(pt_topology_parse(json, "t.json", &t, &err) == 0);
    REQUIRE(t->device_count == 8);
    for (int d = 0; d < 4; d++)
        CHECK(t->devices[d].node_cores == 2);
    CHECK(t->devices[4].node_cores == 3 && t->devices[5].node_cores == 3); /* repeated */
    CHECK(t->devices[6].node_cores == 0 && t->devices[7].node_cores == 0); /* not said */
    /* 4 workers on 2 cores run at half speed; 1 or 2 do not slow down */
    CHECK(pt_topology_oversubscription(t, 0, 4) == 2.0);
    CHECK(pt_topology_oversubscription(t, 3, 2) == 1.0);
    CHECK(pt_topology_oversubscription(t, 1, 1) == 1.0);
    CHECK(pt_topology_oversubscription(t, 4, 6) == 2.0);
    CHECK(pt_topology_oversubscription(t, 6, 100) == 1.0); /* own compute */
    CHECK(pt_topology_oversubscription(t, 99, 100) == 1.0);
    char *text = pt_topology_to_json(t);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "\"cores\"") != NULL);
    pt_topology *back = NULL;
    CHECK_MSG(pt_topology_parse(text, "back", &back, &err) == 0, "%s", err.msg);
    CHECK(back && topo_equal(t, back));
    free(text);
    pt_topology_free(&back);
    pt_topology_free(&t);
}

/* GPU devices: "gpus" numbers cuda:0.. per node, "compute" names one, two
 * devices may share a GPU; each has its agent's --device text, and the
 * record writes back to itself (the gpus form kept). */
static void test_gpus(void)
{
    const char *json = "{\"v\":1,\"name\":\"g\",\"nodes\":["
                       "{\"name\":\"a\",\"gpus\":2,\"repeat\":2,"
                       "\"device\":{\"name\":\"h\",\"memory_gib\":141,\"precision\":\"bf16\"}},"
                       "{\"name\":\"b\",\"devices\":[{\"memory_gib\":80,\"compute\":\"cuda:3\"},"
                       "{\"memory_gib\":80,\"compute\":\"cuda:3\",\"precision\":\"tf32\"},"
                       "{\"memory_gib\":64}]}],"
                       "\"links\":{\"intra\":{\"bandwidth_gbps\":3600,\"latency_us\":2},"
                       "\"inter\":{\"bandwidth_gbps\":400,\"latency_us\":5}}}";
    pt_topology *t = NULL;
    pt_error err = {0};
    CHECK_MSG(pt_topology_parse(json, "g.json", &t, &err) == 0, "%s", err.msg);
    REQUIRE(t != NULL);
    REQUIRE(t->device_count == 7);
    static const char *const want[] = {"cuda:0:bf16", "cuda:1:bf16", "cuda:0:bf16", "cuda:1:bf16",
                                       "cuda:3",      "cuda:3:tf32", "cpu"};
    for (int d = 0; d < 7; d++) {
        char spec[32];
        CHECK(pt_topology_device_spec(t, d, spec, sizeof spec) == (int)strlen(want[d]));
        CHECK_MSG(!strcmp(spec, want[d]), "device %d: %s, want %s", d, spec, want[d]);
        CHECK(pt_topology_device_is_gpu(t, d) == (d < 6));
    }
    char small[4];
    CHECK(pt_topology_device_spec(t, 0, small, sizeof small) == PT_ERANGE);
    CHECK(pt_topology_device_spec(t, 7, small, sizeof small) == PT_ERANGE);
    CHECK(!pt_topology_device_is_gpu(t, -1) && !pt_topology_device_is_gpu(NULL, 0));
    char *text = pt_topology_to_json(t);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "\"gpus\"") != NULL);
    pt_topology *back = NULL;
    CHECK_MSG(pt_topology_parse(text, "back", &back, &err) == 0, "%s", err.msg);
    CHECK(back && topo_equal(t, back));
    free(text);
    pt_topology_free(&back);
    pt_topology_free(&t);
}

/* A record built by hand without node names still writes. */
static void test_no_node_names(void)
{
    pt_link l = {1e9, 1e-6};
    pt_topology *t = pt_topology_uniform(2, 1, 1LL << 30, l, l);
    REQUIRE(t != NULL);
    free(t->node_names);
    t->node_names = NULL;
    pt_topology *back = round_trip(t);
    REQUIRE(back != NULL);
    CHECK(!strcmp(back->node_names[1], "n1"));
    pt_topology_free(&back);
    pt_topology_free(&t);
}

static void test_save_load(void)
{
    pt_topology *t = load("pipedream-cluster-b");
    REQUIRE(t != NULL);
    char path[] = "/tmp/pt_topology_test_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    pt_error err = {0};
    CHECK(pt_topology_save(t, path, &err) == 0);
    pt_topology *back = NULL;
    CHECK_MSG(pt_topology_load(path, &back, &err) == 0, "%s", err.msg);
    CHECK(back && topo_equal(t, back));
    pt_topology_free(&back);
    pt_topology_free(&t);
    unlink(path);
}

PT_TEST_MAIN({"example", test_example},
             {"single_node_inter", test_single_node_inter_defaults_to_intra},
             {"shipped", test_shipped}, {"shipped_figures", test_shipped_figures},
             {"uniform", test_uniform}, {"round_trip_random", test_round_trip_random},
             {"no_node_names", test_no_node_names}, {"shared_cores", test_shared_cores},
             {"save_load", test_save_load}, {"gpus", test_gpus})
