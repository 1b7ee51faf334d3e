/* The layer kinds: one X-macro list, a line per kind (docs/architecture.md,
 * "Layer kinds").
 *
 * X(ENUM, name, flags): PT_LAYER_<ENUM> in pt_layer_kind; `name` is the
 * kind's "type" in model JSON and the suffix of its two definitions,
 *   pt_layer_<name>_facts  (pt_layer_facts, protocol/layer_kind.h): its
 *                          fields, parse and write, shape, parameters and
 *                          FLOPs, analytic memory, checkpoint tensors;
 *   pt_layer_<name>_ops    (pt_layer_ops, runtime/layer.h): its compute;
 * `flags` are its PT_LKF_* facts (protocol/layer_kind.h). Nothing else
 * anywhere names a kind: the enum, the name table and the two tables of
 * definitions are generated from this list.
 *
 *   LINEAR        y = x W + b over the last dimension; "out", "bias" (default true)
 *   RELU, GELU    elementwise (gelu: tanh approximation)
 *   LAYERNORM     over the last dimension, learned gain and bias; "eps" (1e-5)
 *   EMBEDDING     token ids [T] -> [T, dim]; "vocab", "dim", "positional"
 *                 (a learned positional table, default true)
 *   ATTENTION     causal multi-head self-attention on [T, D]: "heads"; D % heads == 0;
 *                 "fused" (optional, false: the tiled kernel keeping only the softmax
 *                 statistics, runtime/attention_tiled.h)
 *   RESIDUAL      y = x + body(x); "body": a chain whose output shape equals its input's
 *   SOFTMAX_XENT  softmax cross-entropy over the last dim, "classes"; the last layer
 *
 * A new kind is a line above the end-of-list comment (which stays last: a
 * test adds a kind by inserting a line there, tests/tui/layer_kind_test.sh). */
#ifndef PT_PROTOCOL_LAYER_KINDS_H
#define PT_PROTOCOL_LAYER_KINDS_H

#define PT_LAYER_LIST(X)                                                                           \
    X(LINEAR, linear, PT_LKF_PARAMS)                                                               \
    X(RELU, relu, 0)                                                                               \
    X(GELU, gelu, 0)                                                                               \
    X(LAYERNORM, layernorm, PT_LKF_PARAMS)                                                         \
    X(EMBEDDING, embedding, PT_LKF_PARAMS | PT_LKF_TOKENS)                                         \
    X(ATTENTION, attention, PT_LKF_PARAMS)                                                         \
    X(RESIDUAL, residual, PT_LKF_BODY)                                                             \
    X(SOFTMAX_XENT, softmax_xent, PT_LKF_LOSS)                                                     \
    /* end of the layer list */

#endif
