/* PipeDream graph.txt reader and writer; the format and the linearisation
 * rule are described in pipedream_profile.h and docs/formats.md. */
#include "protocol/pipedream_profile.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/device.h"
#include "protocol/fileio.h"

#define SEP     " -- "
#define SEP_LEN 4
/* A node line has ID, DESCRIPTION, METADATA and optionally stage_id=N. */
#define NODE_TOKENS_MIN 3
#define NODE_TOKENS_MAX 4
/* Sum of all activation sizes must stay below this so boundary sums fit int64. */
#define ACT_TOTAL_MAX 4611686018427387904.0 /* 2^62 bytes */
/* PyTorch's name of an embedding module, as PipeDream's profiler prints it. */
#define EMBEDDING_PREFIX "Embedding("
/* Digits that make a shortest round-trip decimal for a double. */
#define DOUBLE_DIGITS_MAX 17

enum { F_FWD, F_BWD, F_ACT, F_PARAM, F_COUNT };
static const char *const field_names[F_COUNT] = {"forward_compute_time", "backward_compute_time",
                                                 "activation_size", "parameter_size"};

typedef struct node {
    char id[PT_NAME_MAX];
    char name[PT_NAME_MAX];
    int line;
    int order;   /* index in file order */
    int64_t num; /* number ending the id, or INT64_MAX when there is none */
    double fwd_ms, bwd_ms;
    int64_t act, param;
    int is_input;
    int pos;   /* position among layers; -1 for inputs */
    int last;  /* furthest position of a consumer (>= pos) */
    int indeg; /* remaining in-edges during the sort */
} node;

typedef struct edge_line {
    const char *from, *to;
    int line;
} edge_line;

typedef struct idref {
    const char *id;
    int node;
} idref;

typedef struct parser {
    const char *src;
    pt_error *err;
    node *nodes;
    int n, cap;
    edge_line *elines;
    int ne, ecap;
    idref *sorted;  /* nodes sorted by id, for lookup */
    int *from, *to; /* resolved edges */
} parser;

/* ---- small text helpers ------------------------------------------------ */

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Splits s in place at each " -- "; returns the token count (at most max;
 * max + 1 means there were more). */
static int split_sep(char *s, char **tok, int max)
{
    int n = 0;
    tok[n++] = s;
    for (char *p = strstr(s, SEP); p; p = strstr(p, SEP)) {
        if (n == max)
            return max + 1;
        *p = '\0';
        p += SEP_LEN;
        tok[n++] = p;
    }
    return n;
}

/* A strict decimal number: [+-]digits[.digits][(e|E)[+-]digits], as
 * PipeDream's writer prints them; refuses hex, "nan", "inf" and blanks. */
static int parse_decimal(const char *s, double *out)
{
    const char *p = s;
    int digits = 0;
    if (*p == '+' || *p == '-')
        p++;
    while (isdigit((unsigned char)*p))
        p++, digits++;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p))
            p++, digits++;
    }
    if (!digits)
        return -1;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p)
        return -1;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v))
        return -1;
    *out = v + 0.0; /* -0 becomes 0 */
    return 0;
}

static int value_error(parser *ps, int line, const char *field, const char *text, double v,
                       double max)
{
    if (v < 0)
        return pt_error_set(ps->err, PT_ERANGE, "%s:%d: %s: %s is negative", ps->src, line, field,
                            text);
    return pt_error_set(ps->err, PT_ERANGE, "%s:%d: %s: %s is larger than %.17g", ps->src, line,
                        field, text, max);
}

static int parse_value(parser *ps, int line, const char *field, char *text, double max, double *out)
{
    if (parse_decimal(text, out) < 0)
        return pt_error_set(ps->err, PT_EPARSE, "%s:%d: %s: '%.40s' is not a number", ps->src, line,
                            field, text);
    if (*out < 0 || *out > max)
        return value_error(ps, line, field, text, *out, max);
    return 0;
}

/* activation_size is a number or a list "[A; B; ...]" of a node's outputs. */
static int parse_activation(parser *ps, int line, char *text, double *out)
{
    const char *field = field_names[F_ACT];
    if (*text != '[')
        return parse_value(ps, line, field, text, PT_PIPEDREAM_BYTES_MAX, out);
    size_t n = strlen(text);
    if (n < 2 || text[n - 1] != ']')
        return pt_error_set(ps->err, PT_EPARSE, "%s:%d: %s: list '%.40s' has no closing ']'",
                            ps->src, line, field, text);
    text[n - 1] = '\0';
    double sum = 0;
    int rc;
    for (char *item = text + 1, *next; item; item = next) {
        next = strchr(item, ';');
        if (next)
            *next++ = '\0';
        double v;
        if ((rc = parse_value(ps, line, field, trim(item), PT_PIPEDREAM_BYTES_MAX, &v)) < 0)
            return rc;
        sum += v;
    }
    if (sum > PT_PIPEDREAM_BYTES_MAX)
        return pt_error_set(ps->err, PT_ERANGE, "%s:%d: %s: list sums to %.17g, more than %.17g",
                            ps->src, line, field, sum, PT_PIPEDREAM_BYTES_MAX);
    *out = sum;
    return 0;
}

static int check_id(parser *ps, int line, const char *what, const char *id)
{
    if (!*id)
        return pt_error_set(ps->err, PT_EPARSE, "%s:%d: %s: empty node id", ps->src, line, what);
    if (strlen(id) >= PT_NAME_MAX)
        return pt_error_set(ps->err, PT_EPARSE, "%s:%d: %s: node id '%.40s...' is longer than %d",
                            ps->src, line, what, id, PT_NAME_MAX - 1);
    for (const char *p = id; *p; p++)
        if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
            return pt_error_set(ps->err, PT_EPARSE, "%s:%d: %s: node id '%s' holds a blank",
                                ps->src, line, what, id);
    return 0;
}

/* Copies at most PT_NAME_MAX - 1 bytes, not cutting a UTF-8 sequence. */
static void copy_name(char *dst, const char *src)
{
    size_t n = strlen(src);
    if (n >= PT_NAME_MAX) {
        n = PT_NAME_MAX - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* A description as a layer name: cut to fit with "..." at the end, so a
 * cut name is visibly cut. */
static void name_from_description(char *dst, const char *desc)
{
    static const char ellipsis[] = "...";
    size_t n = strlen(desc);
    if (n < PT_NAME_MAX) {
        memcpy(dst, desc, n + 1);
        return;
    }
    n = PT_NAME_MAX - sizeof ellipsis;
    while (n > 0 && ((unsigned char)desc[n] & 0xC0) == 0x80)
        n--;
    memcpy(dst, desc, n);
    memcpy(dst + n, ellipsis, sizeof ellipsis);
}

static int64_t id_number(const char *id)
{
    size_t n = strlen(id), i = n;
    while (i > 0 && isdigit((unsigned char)id[i - 1]))
        i--;
    if (i == n || n - i > 18)
        return INT64_MAX;
    return strtoll(id + i, NULL, 10);
}

/* ---- lines --------------------------------------------------------------- */

static int parse_metadata(parser *ps, int line, char *meta, node *nd)
{
    double val[F_COUNT];
    int seen[F_COUNT] = {0};
    int rc;
    for (char *f = meta, *next; f; f = next) {
        next = strchr(f, ',');
        if (next)
            *next++ = '\0';
        f = trim(f);
        char *eq = strchr(f, '=');
        if (!eq)
            return pt_error_set(ps->err, PT_EPARSE,
                                "%s:%d: '%.40s' is not KEY=VALUE (truncated line?)", ps->src, line,
                                f);
        *eq = '\0';
        char *key = trim(f), *value = trim(eq + 1);
        int k = 0;
        while (k < F_COUNT && strcmp(key, field_names[k]))
            k++;
        if (k == F_COUNT)
            return pt_error_set(ps->err, PT_EPARSE, "%s:%d: unknown field '%.40s'", ps->src, line,
                                key);
        if (seen[k])
            return pt_error_set(ps->err, PT_EPARSE, "%s:%d: %s: given twice", ps->src, line, key);
        seen[k] = 1;
        if (k == F_ACT)
            rc = parse_activation(ps, line, value, &val[k]);
        else if (k == F_PARAM)
            rc = parse_value(ps, line, key, value, PT_PIPEDREAM_BYTES_MAX, &val[k]);
        else
            rc = parse_value(ps, line, key, value, PT_PIPEDREAM_MS_MAX, &val[k]);
        if (rc < 0)
            return rc;
    }
    for (int k = 0; k < F_COUNT; k++)
        if (!seen[k])
            return pt_error_set(ps->err, PT_EPARSE, "%s:%d: %s: missing field (truncated line?)",
                                ps->src, line, field_names[k]);
    nd->fwd_ms = val[F_FWD];
    nd->bwd_ms = val[F_BWD];
    nd->act = llround(val[F_ACT]);
    nd->param = llround(val[F_PARAM]);
    return 0;
}

static int parse_stage_id(parser *ps, int line, char *tok)
{
    tok = trim(tok);
    const char *key = "stage_id=";
    size_t kn = strlen(key);
    double v;
    if (strncmp(tok, key, kn) || parse_decimal(tok + kn, &v) < 0 || v < 0 || v != floor(v))
        return pt_error_set(ps->err, PT_EPARSE,
                            "%s:%d: expected 'stage_id=N' after the metadata, got '%.40s'", ps->src,
                            line, tok);
    return 0;
}

static int parse_node_line(parser *ps, int line, char *s)
{
    char *tok[NODE_TOKENS_MAX + 1];
    int nt = split_sep(s, tok, NODE_TOKENS_MAX);
    if (nt < NODE_TOKENS_MIN)
        return pt_error_set(ps->err, PT_EPARSE,
                            "%s:%d: truncated node line: expected 'ID -- DESCRIPTION -- "
                            "forward_compute_time=MS, backward_compute_time=MS, "
                            "activation_size=BYTES, parameter_size=BYTES'",
                            ps->src, line);
    if (nt > NODE_TOKENS_MAX)
        return pt_error_set(ps->err, PT_EPARSE,
                            "%s:%d: too many ' -- ' separators (a description may not hold one)",
                            ps->src, line);
    if (ps->n >= PT_PIPEDREAM_NODES_MAX)
        return pt_error_set(ps->err, PT_ERANGE, "%s:%d: more than %d nodes", ps->src, line,
                            PT_PIPEDREAM_NODES_MAX);
    if (ps->n == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 64;
        node *nn = realloc(ps->nodes, (size_t)cap * sizeof *nn);
        if (!nn)
            return pt_error_set(ps->err, PT_ENOMEM, "%s: out of memory", ps->src);
        ps->nodes = nn;
        ps->cap = cap;
    }
    node *nd = &ps->nodes[ps->n];
    memset(nd, 0, sizeof *nd);
    int rc;
    char *id = trim(tok[0]);
    if ((rc = check_id(ps, line, "node", id)) < 0)
        return rc;
    if ((rc = parse_metadata(ps, line, tok[2], nd)) < 0)
        return rc;
    if (nt == NODE_TOKENS_MAX && (rc = parse_stage_id(ps, line, tok[3])) < 0)
        return rc;
    strcpy(nd->id, id);
    name_from_description(nd->name, *tok[1] ? tok[1] : id);
    nd->line = line;
    nd->order = ps->n;
    nd->num = id_number(id);
    nd->is_input = !strncmp(tok[1], "Input", 5);
    ps->n++;
    return 0;
}

static int parse_edge_line(parser *ps, int line, char *s)
{
    char *tok[3];
    int nt = split_sep(trim(s), tok, 2);
    if (nt != 2)
        return pt_error_set(ps->err, PT_EPARSE, "%s:%d: edge: expected '\\tFROM -- TO'", ps->src,
                            line);
    char *from = trim(tok[0]), *to = trim(tok[1]);
    int rc;
    if ((rc = check_id(ps, line, "edge", from)) < 0 || (rc = check_id(ps, line, "edge", to)) < 0)
        return rc;
    if (ps->ne == ps->ecap) {
        int cap = ps->ecap ? ps->ecap * 2 : 64;
        edge_line *ne = realloc(ps->elines, (size_t)cap * sizeof *ne);
        if (!ne)
            return pt_error_set(ps->err, PT_ENOMEM, "%s: out of memory", ps->src);
        ps->elines = ne;
        ps->ecap = cap;
    }
    ps->elines[ps->ne++] = (edge_line){from, to, line};
    return 0;
}

static int parse_lines(parser *ps, char *text)
{
    int line = 0, rc;
    for (char *s = text, *next; s; s = next) {
        line++;
        next = strchr(s, '\n');
        if (next)
            *next++ = '\0';
        if (strlen(s) > PT_PIPEDREAM_LINE_MAX)
            return pt_error_set(ps->err, PT_EPARSE, "%s:%d: line longer than %d bytes", ps->src,
                                line, PT_PIPEDREAM_LINE_MAX);
        char *t = trim(s);
        if (!*t)
            continue;
        /* PipeDream indents edges with a tab; spaces are taken too. */
        if (s[0] == '\t' || s[0] == ' ')
            rc = parse_edge_line(ps, line, t);
        else
            rc = parse_node_line(ps, line, t);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- graph ----------------------------------------------------------- */

static int cmp_id(const void *a, const void *b)
{
    const idref *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    return c ? c : x->node - y->node;
}

static int find_node(const parser *ps, const char *id)
{
    int lo = 0, hi = ps->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(ps->sorted[mid].id, id);
        if (c == 0)
            return ps->sorted[mid].node;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static int resolve(parser *ps)
{
    ps->sorted = malloc((size_t)ps->n * sizeof *ps->sorted);
    ps->from = malloc((size_t)(ps->ne ? ps->ne : 1) * sizeof *ps->from);
    ps->to = malloc((size_t)(ps->ne ? ps->ne : 1) * sizeof *ps->to);
    if (!ps->sorted || !ps->from || !ps->to)
        return pt_error_set(ps->err, PT_ENOMEM, "%s: out of memory", ps->src);
    for (int i = 0; i < ps->n; i++)
        ps->sorted[i] = (idref){ps->nodes[i].id, i};
    qsort(ps->sorted, (size_t)ps->n, sizeof *ps->sorted, cmp_id);
    for (int i = 1; i < ps->n; i++) {
        const node *a = &ps->nodes[ps->sorted[i - 1].node], *b = &ps->nodes[ps->sorted[i].node];
        if (!strcmp(a->id, b->id))
            return pt_error_set(ps->err, PT_EPARSE,
                                "%s:%d: duplicate node id '%s' (first on line %d)", ps->src,
                                b->line, b->id, a->line);
    }
    for (int e = 0; e < ps->ne; e++) {
        const edge_line *el = &ps->elines[e];
        int u = find_node(ps, el->from), v = find_node(ps, el->to);
        if (u < 0 || v < 0)
            return pt_error_set(ps->err, PT_ENOTFOUND, "%s:%d: edge names unknown node '%s'",
                                ps->src, el->line, u < 0 ? el->from : el->to);
        ps->from[e] = u;
        ps->to[e] = v;
    }
    return 0;
}

/* Kahn's algorithm with a binary heap of ready nodes ordered by (id number,
 * file order), so a graph whose ids number a topological order keeps it. */
static int before(const node *a, const node *b)
{
    return a->num != b->num ? a->num < b->num : a->order < b->order;
}

static void heap_push(int *heap, int *len, const node *nodes, int v)
{
    int i = (*len)++;
    heap[i] = v;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!before(&nodes[heap[i]], &nodes[heap[p]]))
            break;
        int t = heap[i];
        heap[i] = heap[p];
        heap[p] = t;
        i = p;
    }
}

static int heap_pop(int *heap, int *len, const node *nodes)
{
    int top = heap[0];
    heap[0] = heap[--(*len)];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *len && before(&nodes[heap[l]], &nodes[heap[m]]))
            m = l;
        if (r < *len && before(&nodes[heap[r]], &nodes[heap[m]]))
            m = r;
        if (m == i)
            break;
        int t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
    return top;
}

/* Compressed adjacency: the edges leaving (or entering) node v are
 * adj[start[v] .. start[v + 1]). */
static int build_adjacency(int n, int ne, const int *key, const int *other, int **start_out,
                           int **adj_out)
{
    int *start = calloc((size_t)n + 1, sizeof *start);
    int *adj = malloc((size_t)(ne ? ne : 1) * sizeof *adj);
    if (!start || !adj) {
        free(start);
        free(adj);
        return PT_ENOMEM;
    }
    for (int e = 0; e < ne; e++)
        start[key[e] + 1]++;
    for (int v = 0; v < n; v++)
        start[v + 1] += start[v];
    int *fill = malloc((size_t)n * sizeof *fill);
    if (!fill) {
        free(start);
        free(adj);
        return PT_ENOMEM;
    }
    memcpy(fill, start, (size_t)n * sizeof *fill);
    for (int e = 0; e < ne; e++)
        adj[fill[key[e]]++] = other[e];
    free(fill);
    *start_out = start;
    *adj_out = adj;
    return 0;
}

/* Names a cycle among the nodes the sort could not place: walking back
 * through unplaced predecessors from any unplaced node must revisit one. */
static int report_cycle(parser *ps, const int *in_start, const int *in_adj)
{
    int n = ps->n, v = 0;
    while (v < n && ps->nodes[v].indeg == 0)
        v++;
    int *seen = calloc((size_t)n, sizeof *seen); /* step at which visited, 1-based */
    int *path = malloc((size_t)n * sizeof *path);
    if (!seen || !path) {
        free(seen);
        free(path);
        return pt_error_set(ps->err, PT_ENOMEM, "%s: out of memory", ps->src);
    }
    int len = 0;
    while (!seen[v]) {
        seen[v] = ++len;
        path[len - 1] = v;
        int u = -1;
        for (int k = in_start[v]; k < in_start[v + 1] && u < 0; k++)
            if (ps->nodes[in_adj[k]].indeg > 0)
                u = in_adj[k];
        v = u;
    }
    /* path[first .. len-1] walks the cycle backwards (each entry is fed by
     * the next, the last by path[first]); print it forwards from path[first]. */
    char msg[PT_ERROR_MAX];
    int first = seen[v] - 1;
    size_t off = (size_t)snprintf(msg, sizeof msg, "%s", ps->nodes[path[first]].id);
    for (int i = len - 1; i >= first && off < sizeof msg; i--)
        off += (size_t)snprintf(msg + off, sizeof msg - off, " -> %s", ps->nodes[path[i]].id);
    int line = ps->nodes[path[first]].line;
    free(seen);
    free(path);
    return pt_error_set(ps->err, PT_EINVAL, "%s:%d: cycle: %.400s", ps->src, line, msg);
}

/* Orders the nodes; fills pos (layers) and returns the layer count. */
static int linearise(parser *ps, int **order_out)
{
    int n = ps->n, rc;
    int *out_start = NULL, *out_adj = NULL, *in_start = NULL, *in_adj = NULL;
    int *heap = malloc((size_t)n * sizeof *heap);
    int *order = malloc((size_t)n * sizeof *order);
    if (!heap || !order) {
        rc = pt_error_set(ps->err, PT_ENOMEM, "%s: out of memory", ps->src);
        goto done;
    }
    if (build_adjacency(n, ps->ne, ps->from, ps->to, &out_start, &out_adj) < 0 ||
        build_adjacency(n, ps->ne, ps->to, ps->from, &in_start, &in_adj) < 0) {
        rc = pt_error_set(ps->err, PT_ENOMEM, "%s: out of memory", ps->src);
        goto done;
    }
    int len = 0, placed = 0, layers = 0;
    for (int v = 0; v < n; v++) {
        node *nd = &ps->nodes[v];
        nd->indeg = in_start[v + 1] - in_start[v];
        /* Only a source can be an input; an "Input..." node fed by another
         * node is an ordinary layer. */
        if (nd->indeg > 0)
            nd->is_input = 0;
        if (nd->indeg == 0)
            heap_push(heap, &len, ps->nodes, v);
    }
    while (len > 0) {
        int v = heap_pop(heap, &len, ps->nodes);
        order[placed++] = v;
        node *nd = &ps->nodes[v];
        nd->pos = nd->is_input ? -1 : layers++;
        nd->last = nd->pos;
        for (int k = out_start[v]; k < out_start[v + 1]; k++)
            if (--ps->nodes[out_adj[k]].indeg == 0)
                heap_push(heap, &len, ps->nodes, out_adj[k]);
    }
    if (placed < n) {
        rc = report_cycle(ps, in_start, in_adj);
        goto done;
    }
    *order_out = order;
    order = NULL;
    rc = layers;
done:
    free(heap);
    free(order);
    free(out_start);
    free(out_adj);
    free(in_start);
    free(in_adj);
    return rc;
}

/* When `device` names a device description, the profile gets its roofline
 * (fp32: PipeDream profiles fp32 training): graph.txt knows no FLOPs and no
 * activation traffic, so each layer is floored by its weights read once
 * (none for an embedding, which gathers rows) and one kernel when it has
 * forward time. No description of that name: no roofline. */
static void add_roofline(pt_profile *p, const char *device)
{
    pt_device_desc d;
    if (pt_device_find(device, &d, NULL) < 0)
        return;
    p->roofline = (pt_profile_roofline){1, pt_device_peak(&d, PT_PRECISION_FP32), d.mem_bandwidth,
                                        d.launch_us};
    for (int i = 0; i < p->layer_count; i++) {
        pt_profile_layer *l = &p->layers[i];
        l->weight_bytes =
            strncmp(l->name, EMBEDDING_PREFIX, strlen(EMBEDDING_PREFIX)) ? l->param_bytes : 0;
        l->kernels = l->fwd_ms > 0;
    }
}

static int build_profile(parser *ps, const int *order, int layers, const pt_pipedream_options *opt,
                         pt_profile **out)
{
    double total = 0;
    for (int v = 0; v < ps->n; v++)
        total += (double)ps->nodes[v].act;
    if (total > ACT_TOTAL_MAX)
        return pt_error_set(ps->err, PT_ERANGE,
                            "%s: activation_size: the nodes' sizes add up to %.17g bytes, more "
                            "than %.17g",
                            ps->src, total, ACT_TOTAL_MAX);
    for (int e = 0; e < ps->ne; e++) {
        node *u = &ps->nodes[ps->from[e]];
        const node *v = &ps->nodes[ps->to[e]];
        if (!u->is_input && v->pos > u->last)
            u->last = v->pos;
    }
    /* cross[k] = sum of act over layers u with pos(u) <= k < last(u). */
    int64_t *diff = calloc((size_t)layers + 1, sizeof *diff);
    pt_profile *p = pt_profile_new(layers);
    if (!diff || !p) {
        free(diff);
        pt_profile_free(&p);
        return pt_error_set(ps->err, PT_ENOMEM, "%s: out of memory", ps->src);
    }
    for (int i = 0; i < ps->n; i++) {
        const node *nd = &ps->nodes[order[i]];
        if (nd->is_input) {
            p->input_bytes += nd->act;
            continue;
        }
        diff[nd->pos] += nd->act;
        diff[nd->last] -= nd->act;
        pt_profile_layer *l = &p->layers[nd->pos];
        memcpy(l->name, nd->name, sizeof l->name);
        l->fwd_ms = nd->fwd_ms;
        l->bwd_ms = nd->bwd_ms;
        l->recompute_ms = nd->fwd_ms;
        l->param_bytes = nd->param;
        if (nd->pos == layers - 1)
            l->act_bytes = nd->act;
    }
    int64_t cross = 0;
    for (int k = 0; k < layers - 1; k++) {
        cross += diff[k];
        if ((double)cross > PT_PIPEDREAM_BYTES_MAX) {
            int rc = pt_error_set(ps->err, PT_ERANGE,
                                  "%s: activation_size: %" PRId64
                                  " bytes cross the boundary after layer %d ('%s'), more than "
                                  "%.17g",
                                  ps->src, cross, k, p->layers[k].name, PT_PIPEDREAM_BYTES_MAX);
            free(diff);
            pt_profile_free(&p);
            return rc;
        }
        p->layers[k].act_bytes = cross;
    }
    free(diff);
    if ((double)p->input_bytes > PT_PIPEDREAM_BYTES_MAX) {
        pt_profile_free(&p);
        return pt_error_set(ps->err, PT_ERANGE,
                            "%s: activation_size: inputs add up to more than %.17g", ps->src,
                            PT_PIPEDREAM_BYTES_MAX);
    }
    copy_name(p->model, opt && opt->model && *opt->model ? opt->model : "imported");
    copy_name(p->device, opt && opt->device && *opt->device ? opt->device : "unknown");
    snprintf(p->source, sizeof p->source, "%s", "imported");
    p->microbatch = opt && opt->microbatch > 0 ? opt->microbatch : 1;
    if (opt && opt->device && *opt->device)
        add_roofline(p, opt->device);
    *out = p;
    return 0;
}

int pt_pipedream_parse(const char *text, size_t len, const char *source,
                       const pt_pipedream_options *opt, pt_profile **out, pt_pipedream_stats *stats,
                       pt_error *err)
{
    if (out)
        *out = NULL;
    if (!source)
        source = "graph.txt";
    if (!text || !out)
        return pt_error_set(err, PT_EINVAL, "%s: no text to parse", source);
    if (memchr(text, '\0', len))
        return pt_error_set(err, PT_EPARSE, "%s: holds a NUL byte (not a text file?)", source);
    parser ps = {.src = source, .err = err};
    int *order = NULL, rc;
    char *buf = malloc(len + 1);
    if (!buf)
        return pt_error_set(err, PT_ENOMEM, "%s: out of memory", source);
    memcpy(buf, text, len);
    buf[len] = '\0';
    if ((rc = parse_lines(&ps, buf)) < 0)
        goto done;
    if (ps.n == 0) {
        rc = pt_error_set(err, PT_EPARSE, "%s: empty graph: no node lines", source);
        goto done;
    }
    if ((rc = resolve(&ps)) < 0)
        goto done;
    int layers = linearise(&ps, &order);
    if (layers < 0) {
        rc = layers;
        goto done;
    }
    if (layers == 0) {
        rc = pt_error_set(err, PT_EPARSE, "%s: no layers: every node is an Input", source);
        goto done;
    }
    if (layers > PT_PROFILE_LAYERS_MAX) {
        rc = pt_error_set(err, PT_ERANGE, "%s: %d layers, more than a profile holds (%d)", source,
                          layers, PT_PROFILE_LAYERS_MAX);
        goto done;
    }
    if ((rc = build_profile(&ps, order, layers, opt, out)) < 0)
        goto done;
    if (stats) {
        stats->nodes = ps.n;
        stats->edges = ps.ne;
        stats->inputs = ps.n - layers;
    }
done:
    free(order);
    free(ps.sorted);
    free(ps.from);
    free(ps.to);
    free(ps.nodes);
    free(ps.elines);
    free(buf);
    return rc;
}

/* "dir/vgg16.graph.txt" -> "vgg16"; "profiles/gnmt/graph.txt" -> "gnmt". */
static void model_from_path(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!strcmp(base, "graph.txt") && base > path) {
        const char *end = base - 1, *start = end;
        while (start > path && start[-1] != '/')
            start--;
        if (end > start) {
            snprintf(out, cap, "%.*s", (int)(end - start), start);
            return;
        }
    }
    size_t n = strlen(base);
    const char *suffixes[] = {".graph.txt", ".txt"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t sn = strlen(suffixes[i]);
        if (n > sn && !strcmp(base + n - sn, suffixes[i])) {
            n -= sn;
            break;
        }
    }
    snprintf(out, cap, "%.*s", (int)n, base);
}

int pt_pipedream_load(const char *path, const pt_pipedream_options *opt, pt_profile **out,
                      pt_pipedream_stats *stats, pt_error *err)
{
    if (out)
        *out = NULL;
    if (!path)
        return pt_error_set(err, PT_EINVAL, "no path given");
    char *text = NULL;
    size_t len = 0;
    int rc = pt_file_read(path, &text, &len, err);
    if (rc < 0)
        return rc;
    pt_pipedream_options o = opt ? *opt : (pt_pipedream_options){0};
    char model[PT_NAME_MAX];
    if (!o.model || !*o.model) {
        model_from_path(path, model, sizeof model);
        o.model = model;
    }
    rc = pt_pipedream_parse(text, len, path, &o, out, stats, err);
    free(text);
    return rc;
}

/* ---- export -------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int failed;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* Shortest decimal that reads back as exactly v. */
static void fmt_double(char *out, size_t cap, double v)
{
    for (int prec = 1; prec <= DOUBLE_DIGITS_MAX; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* A layer name as a description the reader splits back out unchanged: no
 * control characters, and no "--" standing between blanks or the ends
 * (which would make " -- " with the separators around it). */
static void sanitize_name(char *out, const char *name, int index)
{
    if (!*name) {
        snprintf(out, PT_NAME_MAX, "layer%d", index);
        return;
    }
    copy_name(out, name);
    size_t n = strlen(out);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
            out[i] = ' ';
    for (size_t i = 0; i + 1 < n; i++)
        if (out[i] == '-' && out[i + 1] == '-' && (i == 0 || out[i - 1] == ' ') &&
            (i + 2 == n || out[i + 2] == ' '))
            out[i + 1] = ' ';
}

static void write_node(sbuf *b, int id, const char *desc, double fwd, double bwd, int64_t act,
                       int64_t param)
{
    char f[32], w[32];
    fmt_double(f, sizeof f, fwd);
    fmt_double(w, sizeof w, bwd);
    sb_printf(b,
              "node%d -- %s -- forward_compute_time=%s, backward_compute_time=%s, "
              "activation_size=%" PRId64 ".0, parameter_size=%" PRId64 ".0\n",
              id, desc, f, w, act, param);
}

char *pt_pipedream_to_text(const pt_profile *p)
{
    if (!p || p->layer_count <= 0 || !p->layers)
        return NULL;
    sbuf b = {0};
    /* node1 is the input; layer i is node i + 2. */
    write_node(&b, 1, "Input", 0, 0, p->input_bytes, 0);
    for (int i = 0; i < p->layer_count; i++) {
        const pt_profile_layer *l = &p->layers[i];
        char desc[PT_NAME_MAX];
        sanitize_name(desc, l->name, i);
        write_node(&b, i + 2, desc, l->fwd_ms, l->bwd_ms, l->act_bytes, l->param_bytes);
    }
    for (int i = 0; i < p->layer_count; i++)
        sb_printf(&b, "\tnode%d -- node%d\n", i + 1, i + 2);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

int pt_pipedream_save(const pt_profile *profile, const char *path, pt_error *err)
{
    if (!profile || !path)
        return pt_error_set(err, PT_EINVAL, "%s: nothing to write", path ? path : "(null)");
    if (profile->layer_count <= 0)
        return pt_error_set(err, PT_EINVAL, "%s: cannot write a profile of %d layers", path,
                            profile->layer_count);
    return pt_file_save_text(path, pt_pipedream_to_text(profile), err);
}
