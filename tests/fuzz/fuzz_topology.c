/* Fuzz harness for the topology parser (libFuzzer, or replay_main.c over the
 * corpus); the shared properties are in fuzz_format.h. */
#include "protocol/topology.h"
#include "tests/fuzz/fuzz_format.h"

static const char *check(const pt_topology *x)
{
    for (int i = 0; i < x->device_count; i++)
        if (x->devices[i].node < 0 || x->devices[i].node >= x->node_count ||
            x->devices[i].memory_bytes <= 0 || !(x->devices[i].speed > 0))
            return "a parsed topology holds a bad device";
    return NULL;
}

PT_FUZZ_FORMAT("topology", pt_topology, pt_topology_parse, pt_topology_to_json, pt_topology_free,
               check)
