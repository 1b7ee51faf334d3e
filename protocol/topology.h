/* Topology: devices grouped into nodes, and the links between them. */
#ifndef PT_PROTOCOL_TOPOLOGY_H
#define PT_PROTOCOL_TOPOLOGY_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"

#define PT_TOPOLOGY_COMPUTE_MAX   16 /* "cuda:4095" */
#define PT_TOPOLOGY_PRECISION_MAX 8
#define PT_TOPOLOGY_GPU_MAX       4095 /* highest cuda:N */

typedef struct pt_device {
    char name[PT_NAME_MAX];
    int node;             /* index into the topology's nodes */
    int64_t memory_bytes; /* > 0 */
    double speed;         /* relative compute speed; the profile's device is 1.0; > 0 */
    /* CPU cores its node's devices share (N agents on C cores of one host):
     * the node's "cores"; 0 when its devices do not share compute. Every
     * device of a node holds the same value. */
    int node_cores;
    /* Where its agent computes: "" (the CPU) or "cuda:N", GPU N of its node
     * (the device's "compute", or copy N of a node's "gpus"). Two devices
     * of a node naming the same GPU share it. */
    char compute[PT_TOPOLOGY_COMPUTE_MAX];
    /* The GPU's matrix-product precision: "" (fp32), "tf32" or "bf16";
     * "" on the CPU. */
    char precision[PT_TOPOLOGY_PRECISION_MAX];
} pt_device;

typedef struct pt_link {
    double bandwidth; /* bytes per second, > 0 */
    double latency;   /* seconds, >= 0 */
} pt_link;

typedef struct pt_topology {
    char name[PT_NAME_MAX];
    int node_count;
    int device_count;   /* devices are numbered 0..device_count-1, node by node */
    pt_device *devices; /* owned */
    pt_link intra;      /* between devices of one node */
    pt_link inter;      /* between nodes */
    /* owned: node_count names; NULL means "n0", "n1", ... (added after v1 of
     * this header, so records built by hand may leave it NULL) */
    char (*node_names)[PT_NAME_MAX];
} pt_topology;

#define PT_TOPOLOGY_NODES_MAX      4096    /* nodes after "repeat" */
#define PT_TOPOLOGY_DEVICES_MAX    65536   /* devices in all */
#define PT_TOPOLOGY_MEMORY_GIB_MAX 1048576 /* per device (1 PiB) */
#define PT_TOPOLOGY_SPEED_MAX      1e6     /* relative speed */
#define PT_TOPOLOGY_GBPS_MAX       1e9     /* link bandwidth, Gbit/s */
#define PT_TOPOLOGY_LATENCY_US_MAX 1e9     /* link latency, us */
#define PT_TOPOLOGY_CORES_MAX      1048576 /* cores of one node */
#define PT_BYTES_PER_GIB           1073741824.0
#define PT_BITS_PER_BYTE           8.0

/* Parses and validates a topology (docs/formats.md, "Topology"): at least
 * one node, each with at least one device of positive memory and speed,
 * positive link bandwidths. JSON units (GiB, Gbit/s, us) become bytes,
 * bytes/s and seconds here. On success *out owns a new record (free with
 * pt_topology_free); on failure *out is NULL and err names the field. */
int pt_topology_parse(const char *json, const char *source, pt_topology **out, pt_error *err);
/* Reads and parses a file; errors are prefixed with its path. */
int pt_topology_load(const char *path, pt_topology **out, pt_error *err);
/* Serialises to JSON text (caller frees with free()); NULL on no memory.
 * Parsing the result gives back the record, with bandwidth and latency equal
 * up to the rounding of the unit conversion (relative 1e-15). */
char *pt_topology_to_json(const pt_topology *topo);
/* Writes pt_topology_to_json atomically (temporary name, fsync, rename). */
int pt_topology_save(const pt_topology *topo, const char *path, pt_error *err);
/* A uniform topology: nodes x per_node devices of equal memory and speed 1.
 * Returns a new record (free with pt_topology_free), or NULL on no memory
 * or on counts outside [1, PT_TOPOLOGY_*_MAX]. */
pt_topology *pt_topology_uniform(int nodes, int per_node, int64_t memory_bytes, pt_link intra,
                                 pt_link inter);
/* How much slower compute runs on device `dev` when `workers` workers of a
 * plan sit on its node: max(1, workers / node_cores) when the node's devices
 * share cores, else 1 (also for a device out of range). */
double pt_topology_oversubscription(const pt_topology *topo, int dev, int workers);
/* The link between two devices: intra when both sit on one node, else inter
 * (also inter for an index out of range). */
pt_link pt_topology_link(const pt_topology *topo, int dev_a, int dev_b);
/* The --device text of the agent of device `dev`: "cpu", or "cuda:N" with
 * ":tf32"/":bf16" appended for those precisions. Returns the length, or
 * PT_ERANGE (dev out of range, or cap too small). */
int pt_topology_device_spec(const pt_topology *topo, int dev, char *buf, size_t cap);
/* Whether device `dev` computes on a GPU. */
int pt_topology_device_is_gpu(const pt_topology *topo, int dev);
/* NULL-safe; frees what the record owns and sets *topo_p = NULL. */
void pt_topology_free(pt_topology **topo_p);

#endif
