/* PipeDream's profile format (graph.txt), read and written.
 *
 * The format PipeDream's and DAPPLE's public planners read: one line per node
 *
 *   nodeK -- Description -- forward_compute_time=MS, backward_compute_time=MS,
 *            activation_size=BYTES, parameter_size=BYTES[ -- stage_id=N]
 *
 * (on one line; activation_size may be a list "[A; B; ...]" of a node's
 * outputs, which is summed) and one indented line per edge, "\tnodeA -- nodeB".
 * Times are milliseconds for one micro-batch at the profiling batch size,
 * sizes are bytes. See docs/formats.md, "PipeDream profile".
 *
 * Import linearises the DAG into a chain (pt_profile): topological order,
 * ties broken by the number at the end of the node id, then by line order.
 * Source nodes whose description starts with "Input" are inputs: their
 * activation sizes add up to the profile's input_bytes and they are not
 * layers. Layer k's act_bytes is what a stage boundary after position k must
 * send: the sum of the activation sizes of all layers at positions <= k that
 * have a consumer at a position > k. The last layer, after which there is no
 * boundary, keeps its own activation size (what it hands to the loss).
 * Layer names are the nodes' descriptions (the id when empty), cut to 63
 * bytes ending in "..."; recompute_ms is fwd_ms; sizes are rounded to bytes.
 *
 * Export writes a profile as a chain (an "Input" node, then one node per
 * layer, each with an edge to the next), so import(export(p)) gives p back
 * (layers, input bytes) when p's recompute_ms equals its fwd_ms and its names
 * hold no control characters and no "--" with a blank or an end on each side
 * (those are written as blanks so the line still splits; the rest of the
 * file reads back the same). */
#ifndef PT_PROTOCOL_PIPEDREAM_PROFILE_H
#define PT_PROTOCOL_PIPEDREAM_PROFILE_H

#include "protocol/error.h"
#include "protocol/profile.h"

/* Longest line accepted; PipeDream's own lines stay under 1 KiB. */
#define PT_PIPEDREAM_LINE_MAX (64 * 1024)
/* Most nodes in one graph; the shipped graphs have at most 429. */
#define PT_PIPEDREAM_NODES_MAX 1000000
/* Largest size in bytes accepted (2^53: integers stay exact as doubles). */
#define PT_PIPEDREAM_BYTES_MAX 9007199254740992.0
/* Longest time in ms accepted (about 11.6 days for one micro-batch). */
#define PT_PIPEDREAM_MS_MAX 1e9

/* What graph.txt does not say. NULL or zero fields take the defaults. */
typedef struct pt_pipedream_options {
    int microbatch;     /* samples the times are for; default 1 (the file does not say) */
    const char *model;  /* profile's model name; default "imported" */
    const char *device; /* profile's device name; default "unknown". When it names a device
                           description (devices/NAME.json, pt_device_find), the profile gets
                           its roofline: the cost model then floors each layer at its weights
                           over the bandwidth plus a kernel launch (planner/roofline.h) */
} pt_pipedream_options;

/* Figures about the graph an import read, for messages. */
typedef struct pt_pipedream_stats {
    int nodes;  /* node lines */
    int edges;  /* edge lines (duplicates included) */
    int inputs; /* Input nodes folded into input_bytes */
} pt_pipedream_stats;

/* Parses graph.txt text and linearises it. `source` names the text in
 * errors ("vgg16.graph.txt:12: forward_compute_time: ..."); opt and stats
 * may be NULL. On success *out owns a new profile (pt_profile_free) with
 * source "imported"; on failure *out is NULL and err names the line, the
 * field and the reason. */
int pt_pipedream_parse(const char *text, size_t len, const char *source,
                       const pt_pipedream_options *opt, pt_profile **out, pt_pipedream_stats *stats,
                       pt_error *err);

/* Reads and parses a file; the model name defaults to the file name without
 * its directory and ".graph.txt" / ".txt" ending. */
int pt_pipedream_load(const char *path, const pt_pipedream_options *opt, pt_profile **out,
                      pt_pipedream_stats *stats, pt_error *err);

/* Writes profile as a graph.txt chain. Returns a malloc'd string the caller
 * frees, or NULL on no memory or an invalid profile (NULL, no layers). */
char *pt_pipedream_to_text(const pt_profile *profile);

/* Writes pt_pipedream_to_text atomically (temporary name, fsync, rename). */
int pt_pipedream_save(const pt_profile *profile, const char *path, pt_error *err);

#endif
