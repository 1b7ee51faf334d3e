/* Topology: devices grouped into nodes, and the links between them. */
#ifndef PT_PROTOCOL_TOPOLOGY_H
#define PT_PROTOCOL_TOPOLOGY_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/model.h"

typedef struct pt_device {
    char name[PT_NAME_MAX];
    int node;             /* index into the topology's nodes */
    int64_t memory_bytes; /* > 0 */
    double speed;         /* relative compute speed; the profile's device is 1.0; > 0 */
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
} pt_topology;

int pt_topology_parse(const char *json, const char *source, pt_topology **out, pt_error *err);
int pt_topology_load(const char *path, pt_topology **out, pt_error *err);
char *pt_topology_to_json(const pt_topology *topo);
/* A uniform topology: nodes x per_node devices of equal memory and speed 1. */
pt_topology *pt_topology_uniform(int nodes, int per_node, int64_t memory_bytes, pt_link intra,
                                 pt_link inter);
/* The link between two devices (intra when a == b's node). */
pt_link pt_topology_link(const pt_topology *topo, int dev_a, int dev_b);
void pt_topology_free(pt_topology **topo_p);

#endif
