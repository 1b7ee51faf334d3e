/* libpt_cuda_standin.so: a CUDA module (runtime/cuda_module.h) that agents
 * load with $PIPETOP_CUDA_MODULE on a machine without a GPU, so that
 * `pipetop run`, the demo and the console start GPU agents end to end here
 * (tests/gpu/gpu_run.sh). It is the process-wide sibling of
 * tests/gpu/cuda_standin.h (which stands in inside one test program):
 *
 * - devices: $PT_STANDIN_GPUS of them (default 2), each named "stand-in
 *   GPU N" with bus id "standin:N" (two agents on one cuda:N thus
 *   share a GPU, and the console chooses the host path for them) and
 *   STANDIN_DEVICE_BYTES of memory, whose free figure counts what this
 *   process's backends handed out, as cudaMemGetInfo would;
 * - backends: a copy of the CPU backend per device that says it is CUDA,
 *   so the executor takes its host-staged and NCCL paths;
 * - NCCL between processes through files in $TMPDIR
 *   (pt-standin-nccl-<id>/): a send writes a file, a receive waits for it,
 *   an all-reduce sums every rank's file in rank order, a split exchanges
 *   colours the same way. Delivery is buffered, like ZeroMQ's; whether a
 *   real NCCL would deadlock is exec_nccl_test's question, not this one's.
 *
 * Every call appends a line to the folder's "log" ("send 0->1 12544",
 * "recv 1<-0 12544", "allreduce 2 of 2 100480"), so a test can tell which
 * path a run took. Waiting is polling for a file to appear, bounded by
 * STANDIN_TIMEOUT_MS. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cuda_module.h"

#define STANDIN_DEVICES_MAX  16
#define STANDIN_DEVICE_BYTES (16ll << 30)
#define STANDIN_HEADER       64 /* before each allocation: its size; keeps 64-byte alignment */
#define STANDIN_TIMEOUT_MS   30000
#define STANDIN_POLL_NS      200000L /* between looks for a peer's file */
#define STANDIN_RANKS_MAX    256
#define STANDIN_PATH_MAX     512
#define NS_PER_MS            1000000LL

static struct {
    pthread_mutex_t lock;
    pt_backend be[STANDIN_DEVICES_MAX];
    int64_t used[STANDIN_DEVICES_MAX];
    int errors;
    pt_cuda_module m;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int devices(void)
{
    const char *v = getenv("PT_STANDIN_GPUS");
    int n = v ? atoi(v) : 2;
    return n < 1 ? 1 : n > STANDIN_DEVICES_MAX ? STANDIN_DEVICES_MAX : n;
}

static int device_of(const pt_backend *be)
{
    for (int d = 0; d < STANDIN_DEVICES_MAX; d++)
        if (be == &g.be[d])
            return d;
    return -1;
}

/* ---- devices and backends ------------------------------------------------ */

static int probe(pt_error *err)
{
    (void)err;
    return devices();
}
static int count(void)
{
    return devices();
}
static int name(int device, char *buf, size_t cap)
{
    snprintf(buf, cap, "stand-in GPU %d", device);
    return 0;
}
static int bus_id(int device, char *buf, size_t cap)
{
    snprintf(buf, cap, "standin:%d", device);
    return 0;
}
static int error_count(void)
{
    pthread_mutex_lock(&g.lock);
    int n = g.errors;
    pthread_mutex_unlock(&g.lock);
    return n;
}

static void *dev_alloc(const pt_backend *be, size_t bytes)
{
    int d = device_of(be);
    pthread_mutex_lock(&g.lock);
    int fits = d >= 0 && g.used[d] + (int64_t)bytes <= STANDIN_DEVICE_BYTES;
    if (fits)
        g.used[d] += (int64_t)bytes;
    else
        g.errors++;
    pthread_mutex_unlock(&g.lock);
    char *p = fits ? pt_backend_cpu()->alloc(pt_backend_cpu(), bytes + STANDIN_HEADER) : NULL;
    if (!p)
        return NULL;
    int64_t take = (int64_t)bytes;
    memcpy(p, &take, sizeof take);
    return p + STANDIN_HEADER;
}

static void dev_free(const pt_backend *be, void *ptr)
{
    if (!ptr)
        return;
    char *p = (char *)ptr - STANDIN_HEADER;
    int64_t take;
    memcpy(&take, p, sizeof take);
    int d = device_of(be);
    pthread_mutex_lock(&g.lock);
    if (d >= 0)
        g.used[d] -= take;
    pthread_mutex_unlock(&g.lock);
    pt_backend_cpu()->free(pt_backend_cpu(), p);
}

static int backend_create(int device, pt_cuda_math math, const pt_backend **out, pt_error *err)
{
    (void)math;
    if (device < 0 || device >= devices())
        return pt_error_set(err, PT_EINVAL, "cuda:%d: the stand-in has %d devices", device,
                            devices());
    *out = &g.be[device];
    return 0;
}
static void backend_destroy(const pt_backend **be_p)
{
    *be_p = NULL;
}
static int is_cuda(const pt_backend *be)
{
    return device_of(be) >= 0;
}
static int backend_device(const pt_backend *be)
{
    return device_of(be);
}
static void *backend_stream(const pt_backend *be)
{
    return device_of(be) >= 0 ? (void *)be : NULL;
}
static int backend_bind(const pt_backend *be)
{
    (void)be;
    return 0;
}
static int mem_info(const pt_backend *be, int64_t *free_bytes, int64_t *total)
{
    int d = device_of(be);
    if (d < 0)
        return PT_EUNSUPP;
    pthread_mutex_lock(&g.lock);
    if (free_bytes)
        *free_bytes = STANDIN_DEVICE_BYTES - g.used[d];
    pthread_mutex_unlock(&g.lock);
    if (total)
        *total = STANDIN_DEVICE_BYTES;
    return 0;
}

/* ---- NCCL between processes, through files ------------------------------- */

struct pt_nccl {
    char dir[STANDIN_PATH_MAX];
    int rank, size;
    long ar_gen, split_gen;
    long sent[STANDIN_RANKS_MAX], received[STANDIN_RANKS_MAX];
};

static int nccl_load(pt_error *err)
{
    (void)err;
    return 0;
}

static int id_new(unsigned char *id, pt_error *err)
{
    memset(id, 0, PT_NCCL_ID_BYTES);
    memcpy(id, "standin", 7);
    if (getrandom(id + 8, 16, 0) != 16)
        return pt_error_set(err, PT_EIO, "stand-in nccl: getrandom: %s", strerror(errno));
    return 0;
}

/* One line appended to dir/log (O_APPEND: whole lines from every process). */
static void log_call(const pt_nccl *c, const char *what, int peer, size_t n)
{
    char path[STANDIN_PATH_MAX + 8], line[128];
    snprintf(path, sizeof path, "%s/log", c->dir);
    int len = snprintf(line, sizeof line, "%s %d %d %zu\n", what, c->rank, peer, n);
    FILE *f = fopen(path, "a");
    if (f) {
        fwrite(line, 1, (size_t)len, f);
        fclose(f);
    }
}

/* Writes n bytes as file dir/name, atomically (a reader never sees a part). */
static int put_file(const char *dir, const char *fname, const void *buf, size_t n, pt_error *err)
{
    char tmp[STANDIN_PATH_MAX + 96], path[STANDIN_PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s/.%s.%ld", dir, fname, (long)getpid());
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0)
        return pt_error_set(err, PT_EIO, "stand-in nccl: %s: %s", path, strerror(errno));
    return 0;
}

/* Waits for dir/name and reads n bytes of it into buf. */
static int get_file(const char *dir, const char *fname, void *buf, size_t n, pt_error *err)
{
    char path[STANDIN_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    struct timespec nap = {0, STANDIN_POLL_NS};
    for (long waited = 0; waited < STANDIN_TIMEOUT_MS * NS_PER_MS; waited += STANDIN_POLL_NS) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(buf, 1, n, f);
            int extra = fgetc(f) != EOF;
            fclose(f);
            if (got != n || extra)
                return pt_error_set(err, PT_EINVAL, "stand-in nccl: %s holds another size", path);
            return 0;
        }
        nanosleep(&nap, NULL);
    }
    return pt_error_set(err, PT_ETIMEOUT, "stand-in nccl: nothing at %s in %d ms", path,
                        STANDIN_TIMEOUT_MS);
}

static int make_comm(const char *dir, int nranks, int rank, pt_nccl **out, pt_error *err)
{
    if (nranks < 1 || nranks > STANDIN_RANKS_MAX || rank < 0 || rank >= nranks)
        return pt_error_set(err, PT_EINVAL, "stand-in nccl: rank %d of %d", rank, nranks);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return pt_error_set(err, PT_EIO, "stand-in nccl: %s: %s", dir, strerror(errno));
    pt_nccl *c = calloc(1, sizeof *c);
    if (!c)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    c->rank = rank;
    c->size = nranks;
    *out = c;
    return 0;
}

static int nccl_create(const unsigned char *id, int nranks, int rank, int device, void *stream,
                       pt_nccl **out, pt_error *err)
{
    (void)device, (void)stream;
    const char *tmp = getenv("TMPDIR");
    char dir[STANDIN_PATH_MAX], hex[2 * 16 + 1];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", id[8 + i]);
    snprintf(dir, sizeof dir, "%.300s/pt-standin-nccl-%s", tmp && *tmp ? tmp : "/tmp", hex);
    return make_comm(dir, nranks, rank, out, err);
}

/* Colours and keys of every rank, exchanged as all-reduce files are. */
static int nccl_split(pt_nccl *p, int color, int key, pt_nccl **out, pt_error *err)
{
    long gen = p->split_gen++;
    int mine[2] = {color, key}, all[STANDIN_RANKS_MAX][2];
    char f[64];
    snprintf(f, sizeof f, "s%ld-%d", gen, p->rank);
    int rc = put_file(p->dir, f, mine, sizeof mine, err);
    for (int r = 0; r < p->size && rc == 0; r++) {
        snprintf(f, sizeof f, "s%ld-%d", gen, r);
        rc = get_file(p->dir, f, all[r], sizeof all[r], err);
    }
    if (rc < 0)
        return rc;
    int size = 0, rank = 0;
    for (int r = 0; r < p->size; r++) {
        if (all[r][0] != color)
            continue;
        size++;
        rank += all[r][1] < key || (all[r][1] == key && r < p->rank);
    }
    char dir[STANDIN_PATH_MAX];
    snprintf(dir, sizeof dir, "%.400s/c%ld-%d", p->dir, gen, color);
    return make_comm(dir, size, rank, out, err);
}

static void nccl_destroy(pt_nccl *c)
{
    free(c);
}
static int nccl_rank(const pt_nccl *c)
{
    return c->rank;
}
static int nccl_size(const pt_nccl *c)
{
    return c->size;
}

static int nccl_p2p(pt_nccl *c, const pt_nccl_p2p *ops, int n, pt_error *err)
{
    char f[64];
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) /* sends first: a group's calls progress together */
        if (ops[i].send) {
            snprintf(f, sizeof f, "p%d-%d-%ld", c->rank, ops[i].peer, c->sent[ops[i].peer]++);
            rc = put_file(c->dir, f, ops[i].buf, ops[i].count * sizeof(float), err);
            log_call(c, "send", ops[i].peer, ops[i].count);
        }
    for (int i = 0; i < n && rc == 0; i++)
        if (!ops[i].send) {
            snprintf(f, sizeof f, "p%d-%d-%ld", ops[i].peer, c->rank, c->received[ops[i].peer]++);
            rc = get_file(c->dir, f, ops[i].buf, ops[i].count * sizeof(float), err);
            char path[STANDIN_PATH_MAX + 64];
            snprintf(path, sizeof path, "%s/%s", c->dir, f);
            if (rc == 0) {
                unlink(path);
                log_call(c, "recv", ops[i].peer, ops[i].count);
            }
        }
    return rc;
}

/* The sum over ranks in rank order, so every rank gets the same floats. A
 * rank that reached all-reduce g has read every file of g - 1, so once all
 * of g's files are there, g - 1's own can go. */
static int nccl_allreduce(pt_nccl *c, float *buf, size_t n, pt_error *err)
{
    long gen = c->ar_gen++;
    char f[64], path[STANDIN_PATH_MAX + 64];
    snprintf(f, sizeof f, "a%ld-%d", gen, c->rank);
    int rc = put_file(c->dir, f, buf, n * sizeof(float), err);
    float *part = malloc(n * sizeof(float) + 1), *sum = calloc(n + 1, sizeof(float));
    if (rc == 0 && (!part || !sum))
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int r = 0; r < c->size && rc == 0; r++) {
        snprintf(f, sizeof f, "a%ld-%d", gen, r);
        if ((rc = get_file(c->dir, f, part, n * sizeof(float), err)) == 0)
            for (size_t i = 0; i < n; i++)
                sum[i] += part[i];
    }
    if (rc == 0) {
        memcpy(buf, sum, n * sizeof(float));
        log_call(c, "allreduce", c->size, n);
        snprintf(path, sizeof path, "%s/a%ld-%d", c->dir, gen - 1, c->rank);
        unlink(path);
    }
    free(part);
    free(sum);
    return rc;
}

static int nccl_wait(pt_nccl *c, int timeout_ms, pt_error *err)
{
    (void)c, (void)timeout_ms, (void)err;
    return 0; /* every call above completed before it returned */
}

static void fill(void)
{
    for (int d = 0; d < STANDIN_DEVICES_MAX; d++) {
        g.be[d] = *pt_backend_cpu();
        g.be[d].name = "cuda-stand-in";
        g.be[d].alloc = dev_alloc;
        g.be[d].free = dev_free;
    }
    g.m = (pt_cuda_module){
        .abi = PT_CUDA_MODULE_ABI,
        .size = sizeof g.m,
        .backend_size = sizeof(pt_backend),
        .device_probe = probe,
        .device_count = count,
        .device_name = name,
        .device_bus_id = bus_id,
        .error_count = error_count,
        .backend_create = backend_create,
        .backend_destroy = backend_destroy,
        .backend_is_cuda = is_cuda,
        .backend_device = backend_device,
        .backend_stream = backend_stream,
        .backend_bind = backend_bind,
        .backend_mem_info = mem_info,
        .nccl_load = nccl_load,
        .nccl_id_new = id_new,
        .nccl_create = nccl_create,
        .nccl_split = nccl_split,
        .nccl_destroy = nccl_destroy,
        .nccl_rank = nccl_rank,
        .nccl_size = nccl_size,
        .nccl_allreduce = nccl_allreduce,
        .nccl_p2p = nccl_p2p,
        .nccl_wait = nccl_wait,
    };
}

__attribute__((visibility("default"))) const pt_cuda_module *pt_cuda_module_v1(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill);
    return &g.m;
}
