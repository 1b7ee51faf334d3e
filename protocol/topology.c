/* Topology: parser, writer, validator (docs/formats.md, "Topology"). */
#include "protocol/topology.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/json_util.h"

#define US_PER_S            1e6
#define BITS_PER_GBIT       1e9
#define GBPS_MIN            1e-6 /* 1 kbit/s: slower is a typo, and keeps the conversion exact */
#define LATENCY_US_MIN      1e-6 /* below this, a latency must be 0 */
#define DEFAULT_DEVICE_BASE "dev"

static const char *const topo_keys[] = {"v", "name", "nodes", "links", NULL};
static const char *const node_keys[] = {"name",   "devices", "count", "gpus",
                                        "device", "repeat",  "cores", NULL};
static const char *const device_keys[] = {"name",    "memory_gib", "speed",
                                          "compute", "precision",  NULL};
/* A GPU's matrix-product precisions; the first is the default. */
static const char *const precisions[] = {"fp32", "tf32", "bf16", NULL};
static const char *const links_keys[] = {"intra", "inter", NULL};
static const char *const link_keys[] = {"bandwidth_gbps", "latency_us", NULL};

void pt_topology_free(pt_topology **topo_p)
{
    if (!topo_p || !*topo_p)
        return;
    free((*topo_p)->devices);
    free((*topo_p)->node_names);
    free(*topo_p);
    *topo_p = NULL;
}

static pt_topology *alloc_topology(int nodes, int devices)
{
    pt_topology *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->devices = calloc((size_t)devices, sizeof *t->devices);
    t->node_names = calloc((size_t)nodes, sizeof *t->node_names);
    if (!t->devices || !t->node_names) {
        pt_topology_free(&t);
        return NULL;
    }
    t->node_count = nodes;
    t->device_count = devices;
    return t;
}

/* ---- parsing ----------------------------------------------------------- */

/* A device's "compute" ("cpu" or "cuda:N") and "precision" (a GPU's);
 * gpus: the template of a "gpus" node, whose copies are GPUs. */
static int parse_compute(pt_jr *jr, const cJSON *obj, const char *path, int gpus, pt_device *d)
{
    char text[32], prec[16];
    int rc = pt_jr_str(jr, obj, path, "compute", PT_JR_OPTIONAL, "cpu", text, sizeof text);
    if (rc < 0 || (rc = pt_jr_str(jr, obj, path, "precision", PT_JR_OPTIONAL, precisions[0], prec,
                                  sizeof prec)) < 0)
        return rc;
    d->compute[0] = d->precision[0] = '\0';
    if (strcmp(text, "cpu") != 0) {
        char *end = NULL;
        long n = strncmp(text, "cuda:", 5) == 0 ? strtol(text + 5, &end, 10) : -1;
        if (!end || end == text + 5 || *end || n < 0 || n > PT_TOPOLOGY_GPU_MAX)
            return pt_jr_fail(jr, PT_EINVAL, path, "compute",
                              "\"%s\" is neither \"cpu\" nor \"cuda:N\" with N in [0, %d]", text,
                              PT_TOPOLOGY_GPU_MAX);
        snprintf(d->compute, sizeof d->compute, "cuda:%ld", n);
    }
    int k = 0;
    while (precisions[k] && strcmp(precisions[k], prec) != 0)
        k++;
    if (!precisions[k])
        return pt_jr_fail(jr, PT_EINVAL, path, "precision", "\"%s\" is not one of fp32, tf32, bf16",
                          prec);
    if (k > 0 && !d->compute[0] && !gpus)
        return pt_jr_fail(jr, PT_EINVAL, path, "precision",
                          "%s needs a GPU (\"compute\": \"cuda:N\")", prec);
    if (k > 0)
        memcpy(d->precision, precisions[k], strlen(precisions[k]) + 1); /* 5 of 8 bytes */
    return 0;
}

/* Reads one device object at path; a missing name becomes def_name. */
static int parse_device(pt_jr *jr, const cJSON *obj, const char *path, const char *def_name,
                        int gpus, pt_device *d)
{
    int rc = pt_jr_is_object(jr, obj, path);
    if (rc < 0 || (rc = pt_jr_keys(jr, obj, path, device_keys)) < 0)
        return rc;
    double gib, speed;
    pt_jr_range mem_r = {0.0, PT_TOPOLOGY_MEMORY_GIB_MAX, 1, 0};
    pt_jr_range speed_r = {0.0, PT_TOPOLOGY_SPEED_MAX, 1, 0};
    if ((rc = pt_jr_str(jr, obj, path, "name", PT_JR_OPTIONAL, def_name, d->name, sizeof d->name)) <
            0 ||
        (rc = pt_jr_num(jr, obj, path, "memory_gib", PT_JR_REQUIRED, 0, mem_r, &gib)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "speed", PT_JR_OPTIONAL, 1.0, speed_r, &speed)) < 0)
        return rc;
    d->memory_bytes = llround(gib * PT_BYTES_PER_GIB);
    if (d->memory_bytes < 1)
        return pt_jr_fail(jr, PT_ERANGE, path, "memory_gib", "must be at least one byte (got %g)",
                          gib);
    d->speed = speed;
    return parse_compute(jr, obj, path, gpus, d);
}

/* What one entry of "nodes" expands to: repeat nodes of count devices. */
typedef struct node_entry {
    const cJSON *obj;
    const cJSON *devices; /* the "devices" array, or NULL for count + device */
    int count, repeat;
    int gpus; /* count + device given as "gpus": copy j computes on cuda:j */
} node_entry;

static int measure_node(pt_jr *jr, const cJSON *obj, const char *path, node_entry *e)
{
    int rc = pt_jr_is_object(jr, obj, path);
    if (rc < 0 || (rc = pt_jr_keys(jr, obj, path, node_keys)) < 0)
        return rc;
    e->obj = obj;
    if ((rc = pt_jr_int(jr, obj, path, "repeat", PT_JR_OPTIONAL, 1, 1, PT_TOPOLOGY_NODES_MAX,
                        &e->repeat)) < 0)
        return rc;
    const cJSON *devices = pt_jr_item(obj, "devices");
    const cJSON *count = pt_jr_item(obj, "count");
    const cJSON *device = pt_jr_item(obj, "device");
    const char *count_key = "count";
    if (pt_jr_item(obj, "gpus")) {
        if (count)
            return pt_jr_fail(jr, PT_EINVAL, path, "gpus", "give \"count\" or \"gpus\", not both");
        count = pt_jr_item(obj, "gpus");
        count_key = "gpus";
        e->gpus = 1;
    }
    if (devices && (count || device))
        return pt_jr_fail(jr, PT_EINVAL, path, NULL,
                          "give either \"devices\" or \"count\" with \"device\", not both");
    if (devices) {
        if ((rc = pt_jr_array(jr, obj, path, "devices", PT_JR_REQUIRED, 1, &e->devices,
                              &e->count)) < 0)
            return rc;
        if (e->count > PT_TOPOLOGY_DEVICES_MAX)
            return pt_jr_fail(jr, PT_ERANGE, path, "devices", "more than %d devices",
                              PT_TOPOLOGY_DEVICES_MAX);
        return 0;
    }
    if (!count && !device)
        return pt_jr_fail(jr, PT_EINVAL, path, "devices",
                          "missing (a node lists \"devices\" or gives \"count\" and \"device\")");
    if (!device)
        return pt_jr_fail(jr, PT_EINVAL, path, "device", "missing (\"count\" needs \"device\")");
    if (!count)
        return pt_jr_fail(jr, PT_EINVAL, path, "count", "missing (\"device\" needs \"count\")");
    e->devices = NULL;
    int cap = e->gpus ? PT_TOPOLOGY_GPU_MAX + 1 : PT_TOPOLOGY_DEVICES_MAX;
    return pt_jr_int(jr, obj, path, count_key, PT_JR_REQUIRED, 0, 1, cap, &e->count);
}

/* Parses the devices of entry e into out[0..e->count) with node index node. */
static int parse_node_devices(pt_jr *jr, const node_entry *e, const char *path, pt_device *out)
{
    int rc;
    if (e->devices) {
        int j = 0;
        for (const cJSON *d = e->devices->child; d && j < e->count; d = d->next, j++) {
            char dpath[PT_JPATH_MAX], def[PT_NAME_MAX];
            pt_jr_join_index(dpath, sizeof dpath, path, "devices", j);
            snprintf(def, sizeof def, DEFAULT_DEVICE_BASE "%d", j);
            if ((rc = parse_device(jr, d, dpath, def, 0, &out[j])) < 0)
                return rc;
        }
        return 0;
    }
    char dpath[PT_JPATH_MAX];
    pt_jr_join(dpath, sizeof dpath, path, "device");
    pt_device tmpl;
    if ((rc = parse_device(jr, pt_jr_item(e->obj, "device"), dpath, DEFAULT_DEVICE_BASE, e->gpus,
                           &tmpl)) < 0)
        return rc;
    if (e->gpus && tmpl.compute[0])
        return pt_jr_fail(jr, PT_EINVAL, dpath, "compute",
                          "not with \"gpus\" (copy j computes on cuda:j)");
    size_t base_len = strlen(tmpl.name);
    for (int j = 0; j < e->count; j++) {
        out[j] = tmpl;
        char idx[16];
        int n = snprintf(idx, sizeof idx, "%d", j);
        if (base_len + (size_t)n >= sizeof tmpl.name)
            return pt_jr_fail(jr, PT_ERANGE, dpath, "name",
                              "\"%s\" is too long to number its %d copies", tmpl.name, e->count);
        memcpy(out[j].name + base_len, idx, (size_t)n + 1);
        if (e->gpus)
            snprintf(out[j].compute, sizeof out[j].compute, "cuda:%d", j);
    }
    return 0;
}

/* JSON units to the record's: Gbit/s -> bytes/s and us -> s. */
static double gbps_to_bytes(double gbps)
{
    return gbps * (BITS_PER_GBIT / PT_BITS_PER_BYTE);
}

static double us_to_s(double us)
{
    return us / US_PER_S;
}

/* The JSON value j, near approx, with to_record(j) == v exactly, so a record
 * read from JSON is written back as a value that reads back the same. When
 * no such j lies within a few ulps (a record built by hand), approx. */
static double json_value(double v, double approx, double (*to_record)(double))
{
    enum { ULPS = 4 };
    if (to_record(approx) == v)
        return approx;
    double up = approx, down = approx;
    for (int k = 0; k < ULPS; k++) {
        up = nextafter(up, INFINITY);
        down = nextafter(down, -INFINITY);
        if (to_record(up) == v)
            return up;
        if (to_record(down) == v)
            return down;
    }
    return approx;
}

static int parse_link(pt_jr *jr, const cJSON *links, const char *key, int required, pt_link *l)
{
    const cJSON *obj;
    int rc = pt_jr_object(jr, links, "links", key, required, &obj);
    if (rc < 0 || !obj)
        return rc;
    char path[PT_JPATH_MAX];
    pt_jr_join(path, sizeof path, "links", key);
    double gbps, us;
    pt_jr_range bw_r = {0.0, PT_TOPOLOGY_GBPS_MAX, 1, 0};
    pt_jr_range lat_r = {0.0, PT_TOPOLOGY_LATENCY_US_MAX, 0, 0};
    if ((rc = pt_jr_keys(jr, obj, path, link_keys)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "bandwidth_gbps", PT_JR_REQUIRED, 0, bw_r, &gbps)) < 0 ||
        (rc = pt_jr_num(jr, obj, path, "latency_us", PT_JR_REQUIRED, 0, lat_r, &us)) < 0)
        return rc;
    if (gbps < GBPS_MIN)
        return pt_jr_fail(jr, PT_ERANGE, path, "bandwidth_gbps", "must be >= %g (got %g)", GBPS_MIN,
                          gbps);
    if (us > 0.0 && us < LATENCY_US_MIN)
        return pt_jr_fail(jr, PT_ERANGE, path, "latency_us", "must be 0 or >= %g (got %g)",
                          LATENCY_US_MIN, us);
    l->bandwidth = gbps_to_bytes(gbps);
    l->latency = us_to_s(us);
    return 0;
}

int pt_topology_parse(const char *json, const char *source, pt_topology **out, pt_error *err)
{
    *out = NULL;
    pt_jr jr = {source, err};
    cJSON *root;
    int rc = pt_jr_parse(&jr, json, &root);
    if (rc < 0)
        return rc;
    pt_topology *t = NULL;
    node_entry *entries = NULL;
    const cJSON *nodes, *links;
    int n;
    char name[PT_NAME_MAX];
    if ((rc = pt_jr_keys(&jr, root, "", topo_keys)) < 0 ||
        (rc = pt_jr_str(&jr, root, "", "name", PT_JR_REQUIRED, NULL, name, sizeof name)) < 0 ||
        (rc = pt_jr_array(&jr, root, "", "nodes", PT_JR_REQUIRED, 1, &nodes, &n)) < 0)
        goto done;
    if (n > PT_TOPOLOGY_NODES_MAX) {
        rc = pt_jr_fail(&jr, PT_ERANGE, "", "nodes", "more than %d nodes", PT_TOPOLOGY_NODES_MAX);
        goto done;
    }
    if (!(entries = calloc((size_t)n, sizeof *entries))) {
        rc = pt_jr_fail(&jr, PT_ENOMEM, "", NULL, "out of memory");
        goto done;
    }
    /* First pass: sizes only, so the records are allocated once. */
    int64_t node_total = 0, device_total = 0;
    int i = 0;
    for (const cJSON *e = nodes->child; e && i < n; e = e->next, i++) {
        char path[PT_JPATH_MAX];
        pt_jr_join_index(path, sizeof path, "", "nodes", i);
        if ((rc = measure_node(&jr, e, path, &entries[i])) < 0)
            goto done;
        node_total += entries[i].repeat;
        device_total += (int64_t)entries[i].repeat * entries[i].count;
        if (node_total > PT_TOPOLOGY_NODES_MAX || device_total > PT_TOPOLOGY_DEVICES_MAX) {
            rc = pt_jr_fail(&jr, PT_ERANGE, path, NULL,
                            "the topology grows past %d nodes or %d devices here",
                            PT_TOPOLOGY_NODES_MAX, PT_TOPOLOGY_DEVICES_MAX);
            goto done;
        }
    }
    if (!(t = alloc_topology((int)node_total, (int)device_total))) {
        rc = pt_jr_fail(&jr, PT_ENOMEM, "", NULL, "out of memory");
        goto done;
    }
    memcpy(t->name, name, sizeof name);
    int node = 0, dev = 0;
    for (i = 0; i < n; i++) {
        const node_entry *e = &entries[i];
        char path[PT_JPATH_MAX], base[PT_NAME_MAX];
        int cores;
        pt_jr_join_index(path, sizeof path, "", "nodes", i);
        if ((rc = parse_node_devices(&jr, e, path, &t->devices[dev])) < 0 ||
            (rc = pt_jr_str(&jr, e->obj, path, "name", PT_JR_OPTIONAL, NULL, base, sizeof base)) <
                0 ||
            (rc = pt_jr_int(&jr, e->obj, path, "cores", PT_JR_OPTIONAL, 0, 1, PT_TOPOLOGY_CORES_MAX,
                            &cores)) < 0)
            goto done;
        for (int j = 0; j < e->count; j++)
            t->devices[dev + j].node_cores = cores;
        for (int r = 0; r < e->repeat; r++, node++) {
            int len;
            /* A repeated node named "rack" yields "rack0", "rack1", ... */
            if (!base[0])
                len = snprintf(t->node_names[node], PT_NAME_MAX, "n%d", node);
            else if (e->repeat > 1)
                len = snprintf(t->node_names[node], PT_NAME_MAX, "%s%d", base, r);
            else
                len = snprintf(t->node_names[node], PT_NAME_MAX, "%s", base);
            if (len >= PT_NAME_MAX) {
                rc = pt_jr_fail(&jr, PT_ERANGE, path, "name",
                                "\"%s\" is too long to number its %d copies", base, e->repeat);
                goto done;
            }
            if (r > 0)
                memcpy(&t->devices[dev], &t->devices[dev - e->count],
                       (size_t)e->count * sizeof *t->devices);
            for (int j = 0; j < e->count; j++)
                t->devices[dev + j].node = node;
            dev += e->count;
        }
    }
    if ((rc = pt_jr_object(&jr, root, "", "links", PT_JR_REQUIRED, &links)) < 0 ||
        (rc = pt_jr_keys(&jr, links, "links", links_keys)) < 0 ||
        (rc = parse_link(&jr, links, "intra", PT_JR_REQUIRED, &t->intra)) < 0)
        goto done;
    if (!pt_jr_item(links, "inter") && t->node_count > 1) {
        rc = pt_jr_fail(&jr, PT_EINVAL, "links", "inter",
                        "missing (needed with more than one node)");
        goto done;
    }
    t->inter = t->intra;
    rc = parse_link(&jr, links, "inter", PT_JR_OPTIONAL, &t->inter);
done:
    free(entries);
    cJSON_Delete(root);
    if (rc < 0)
        pt_topology_free(&t);
    *out = t;
    return rc;
}

int pt_topology_load(const char *path, pt_topology **out, pt_error *err)
{
    *out = NULL;
    char *text;
    int rc = pt_file_read(path, &text, NULL, err);
    if (rc < 0)
        return rc;
    rc = pt_topology_parse(text, path, out, err);
    free(text);
    return rc;
}

/* ---- writing ----------------------------------------------------------- */

static cJSON *device_json(const pt_device *d, const char *name, int with_compute)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (!cJSON_AddStringToObject(o, "name", name) ||
        !pt_jr_add_number(o, "memory_gib", (double)d->memory_bytes / PT_BYTES_PER_GIB) ||
        !pt_jr_add_number(o, "speed", d->speed) ||
        (with_compute && d->compute[0] && !cJSON_AddStringToObject(o, "compute", d->compute)) ||
        (d->precision[0] && !cJSON_AddStringToObject(o, "precision", d->precision))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Whether devices d[0..k) are one template named base0, base1, ... with equal
 * memory, speed and precision, so the node can be written as "count" +
 * "device" (1: every one on the CPU) or "gpus" + "device" (2: device j on
 * cuda:j); else 0. */
static int uniform_devices(const pt_device *d, int k, char *base, size_t cap)
{
    size_t len = strlen(d[0].name);
    if (len < 2 || d[0].name[len - 1] != '0' || len - 1 >= cap)
        return 0;
    memcpy(base, d[0].name, len - 1);
    base[len - 1] = '\0';
    for (int j = 0; j < k; j++) {
        char want[PT_NAME_MAX + 16];
        snprintf(want, sizeof want, "%s%d", base, j);
        if (strcmp(want, d[j].name) || d[j].memory_bytes != d[0].memory_bytes ||
            d[j].speed != d[0].speed || strcmp(d[j].precision, d[0].precision))
            return 0;
    }
    int gpus = 1, cpus = 1;
    for (int j = 0; j < k; j++) {
        char want[PT_TOPOLOGY_COMPUTE_MAX + 16];
        snprintf(want, sizeof want, "cuda:%d", j);
        gpus &= strcmp(want, d[j].compute) == 0;
        cpus &= d[j].compute[0] == '\0';
    }
    return cpus ? 1 : gpus ? 2 : 0;
}

static cJSON *link_json(pt_link l)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    double gbps =
        json_value(l.bandwidth, l.bandwidth / (BITS_PER_GBIT / PT_BITS_PER_BYTE), gbps_to_bytes);
    double us = json_value(l.latency, l.latency * US_PER_S, us_to_s);
    if (!pt_jr_add_number(o, "bandwidth_gbps", gbps) || !pt_jr_add_number(o, "latency_us", us)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *node_json(const pt_topology *topo, int node, int first, int k)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    char name[PT_NAME_MAX];
    if (topo->node_names && topo->node_names[node][0])
        snprintf(name, sizeof name, "%s", topo->node_names[node]);
    else
        snprintf(name, sizeof name, "n%d", node);
    const pt_device *d = &topo->devices[first];
    if (!cJSON_AddStringToObject(o, "name", name) ||
        (k > 0 && d[0].node_cores > 0 && !pt_jr_add_number(o, "cores", d[0].node_cores)))
        goto fail;
    char base[PT_NAME_MAX];
    int uniform = k > 1 ? uniform_devices(d, k, base, sizeof base) : 0;
    if (uniform) {
        cJSON *dev = device_json(&d[0], base, 0);
        if (!pt_jr_add_number(o, uniform == 2 ? "gpus" : "count", k) || !dev) {
            cJSON_Delete(dev);
            goto fail;
        }
        cJSON_AddItemToObject(o, "device", dev);
        return o;
    }
    cJSON *arr = cJSON_AddArrayToObject(o, "devices");
    if (!arr)
        goto fail;
    for (int j = 0; j < k; j++) {
        cJSON *dev = device_json(&d[j], d[j].name, 1);
        if (!dev)
            goto fail;
        cJSON_AddItemToArray(arr, dev);
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

char *pt_topology_to_json(const pt_topology *topo)
{
    if (!topo)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON *nodes, *links, *intra, *inter;
    if (!pt_jr_add_number(root, "v", PT_FORMAT_VERSION) ||
        !cJSON_AddStringToObject(root, "name", topo->name) ||
        !(nodes = cJSON_AddArrayToObject(root, "nodes")))
        goto fail;
    /* Devices are numbered node by node; each node's devices are a run. */
    int dev = 0;
    for (int node = 0; node < topo->node_count; node++) {
        int first = dev;
        while (dev < topo->device_count && topo->devices[dev].node == node)
            dev++;
        cJSON *o = node_json(topo, node, first, dev - first);
        if (!o)
            goto fail;
        cJSON_AddItemToArray(nodes, o);
    }
    if (!(links = cJSON_AddObjectToObject(root, "links")))
        goto fail;
    intra = link_json(topo->intra);
    inter = link_json(topo->inter);
    if (!intra || !inter) {
        cJSON_Delete(intra);
        cJSON_Delete(inter);
        goto fail;
    }
    cJSON_AddItemToObject(links, "intra", intra);
    cJSON_AddItemToObject(links, "inter", inter);
    return pt_jr_print_and_delete(root);
fail:
    cJSON_Delete(root);
    return NULL;
}

int pt_topology_save(const pt_topology *topo, const char *path, pt_error *err)
{
    return pt_file_save_text(path, pt_topology_to_json(topo), err);
}

/* ---- helpers ----------------------------------------------------------- */

pt_topology *pt_topology_uniform(int nodes, int per_node, int64_t memory_bytes, pt_link intra,
                                 pt_link inter)
{
    if (nodes < 1 || per_node < 1 || nodes > PT_TOPOLOGY_NODES_MAX ||
        per_node > PT_TOPOLOGY_DEVICES_MAX / nodes)
        return NULL;
    pt_topology *t = alloc_topology(nodes, nodes * per_node);
    if (!t)
        return NULL;
    snprintf(t->name, sizeof t->name, "uniform-%dx%d", nodes, per_node);
    for (int i = 0; i < nodes; i++) {
        snprintf(t->node_names[i], PT_NAME_MAX, "n%d", i);
        for (int j = 0; j < per_node; j++) {
            pt_device *d = &t->devices[i * per_node + j];
            snprintf(d->name, sizeof d->name, DEFAULT_DEVICE_BASE "%d", j);
            d->node = i;
            d->memory_bytes = memory_bytes;
            d->speed = 1.0;
        }
    }
    t->intra = intra;
    t->inter = inter;
    return t;
}

double pt_topology_oversubscription(const pt_topology *topo, int dev, int workers)
{
    if (!topo || dev < 0 || dev >= topo->device_count || topo->devices[dev].node_cores < 1)
        return 1.0;
    double share = (double)workers / topo->devices[dev].node_cores;
    return share > 1.0 ? share : 1.0;
}

pt_link pt_topology_link(const pt_topology *topo, int dev_a, int dev_b)
{
    if (dev_a < 0 || dev_b < 0 || dev_a >= topo->device_count || dev_b >= topo->device_count)
        return topo->inter;
    return topo->devices[dev_a].node == topo->devices[dev_b].node ? topo->intra : topo->inter;
}

int pt_topology_device_spec(const pt_topology *topo, int dev, char *buf, size_t cap)
{
    if (!topo || dev < 0 || dev >= topo->device_count)
        return PT_ERANGE;
    const pt_device *d = &topo->devices[dev];
    int n = d->compute[0]
                ? snprintf(buf, cap, "%s%s%s", d->compute, d->precision[0] ? ":" : "", d->precision)
                : snprintf(buf, cap, "cpu");
    return n < 0 || (size_t)n >= cap ? PT_ERANGE : n;
}

int pt_topology_device_is_gpu(const pt_topology *topo, int dev)
{
    return topo && dev >= 0 && dev < topo->device_count && topo->devices[dev].compute[0] != '\0';
}
