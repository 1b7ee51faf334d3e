/* Prints the data plane's figures (runtime/comm.h), every worker a thread:
 *  1. point-to-point bandwidth, 4 KiB .. 16 MiB messages, over the
 *     shared-memory rings local agents use (shm), and with shared memory off
 *     over inproc, ipc and tcp on 127.0.0.1 (what remote peers use), with the
 *     copying and the zero-copy send;
 *  2. latency (half a 4-byte round trip) per transport;
 *  3. ring all-reduce time for p = 2 and 4 against the ring model
 *     T = 2(p-1)a + 2(p-1)/p n/b + (p-1)/p n g, with a the latency, b the
 *     bandwidth at the ring's message size and g the measured time per byte
 *     of the reduction, all measured above on the same transport.
 *  4. beside each all-reduce figure, OpenMPI's MPI_Allreduce of the same
 *     size among p processes over shared memory (bench/mpi/mpi_allreduce.c,
 *     run with mpirun from here, so both figures come from one run), when the
 *     build found MPI;
 *  5. the "shm-proc" rows: the same all-reduce and the 1-float latency with
 *     every rank a process of its own (fork), as agents are and as MPI's
 *     ranks are, timed as mpi_allreduce times MPI (a barrier before each
 *     repetition, rank 0's clock, the median).
 * Usage: comm_bandwidth [--quick]; comm_bandwidth --allreduce [REPS [P [MIB]]] runs
 * only the shm-proc all-reduces and MPI's, with context switches per
 * all-reduce and the load average. Never a test: it only prints. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/clock.h"
#include "runtime/comm.h"

#define MAX_P          4
#define TIMEOUT_MS     30000
#define MIN_BYTES      4096
#define MAX_BYTES      (16 << 20)
#define TARGET_BYTES   (256LL << 20) /* data moved per bandwidth point */
#define MIN_MSGS       8
#define MAX_MSGS       4096
#define PINGS          2000
#define LAT_WARMUP     50
#define AR_REPS        11
#define P2P_TRIES      3
#define REDUCE_REPS    20
#define PROBE_REPS_MAX 1000 /* --allreduce REPS */

/* shm: local peers over the shared-memory rings (what agents on one host
 * use); the others are ZeroMQ alone (shared memory off), as remote peers. */
typedef enum { T_SHM, T_INPROC, T_IPC, T_TCP, T_COUNT } transport;
static const char *const tname[] = {"shm", "inproc", "ipc", "tcp"};

typedef struct world {
    int p;
    void *ctx;
    pt_comm *comm[MAX_P];
    char dir[64];
} world;

static int world_seq;

static int world_open(world *w, int p, transport t)
{
    memset(w, 0, sizeof *w);
    w->p = p;
    w->ctx = zmq_ctx_new();
    if (t == T_IPC || t == T_SHM) {
        snprintf(w->dir, sizeof w->dir, "/tmp/pt-comm-bench-XXXXXX");
        if (!mkdtemp(w->dir))
            return -1;
    }
    const char *eps[MAX_P];
    int id = world_seq++;
    for (int r = 0; r < p; r++) {
        char bind[128];
        if (t == T_INPROC)
            snprintf(bind, sizeof bind, "inproc://bench-%d-%d", id, r);
        else if (t == T_TCP)
            snprintf(bind, sizeof bind, "tcp://127.0.0.1:*");
        else
            snprintf(bind, sizeof bind, "ipc://%s/r%d", w->dir, r);
        pt_comm_config cfg = {.rank = r,
                              .size = p,
                              .bind_endpoint = bind,
                              .zmq_context = w->ctx,
                              .timeout_ms = TIMEOUT_MS,
                              .shm = t == T_SHM ? 1 : -1};
        pt_error err = {0};
        if (pt_comm_create(&cfg, &w->comm[r], &err) < 0) {
            fprintf(stderr, "comm_bandwidth: %s\n", err.msg);
            return -1;
        }
        eps[r] = pt_comm_endpoint(w->comm[r]);
    }
    for (int r = 0; r < p; r++)
        if (pt_comm_connect(w->comm[r], eps, NULL) < 0)
            return -1;
    return 0;
}

static void world_close(world *w)
{
    for (int r = 0; r < w->p; r++)
        pt_comm_destroy(&w->comm[r]);
    zmq_ctx_term(w->ctx);
    if (w->dir[0])
        rmdir(w->dir);
}

/* ---- point to point ---------------------------------------------------------- */

typedef struct p2p_job {
    world *w;
    size_t floats;
    int msgs;
    int zero_copy;
    float *buf[2];
    double seconds;
    int rc;
} p2p_job;

static void *p2p_receiver(void *arg)
{
    p2p_job *j = arg;
    pt_comm *c = j->w->comm[1];
    for (int i = 0; i < j->msgs; i++)
        j->rc |= pt_comm_recv(c, 0, pt_comm_tag(PT_COMM_USER, (uint32_t)i, 0), j->buf[1], j->floats,
                              NULL);
    float ack = 1;
    j->rc |= pt_comm_send(c, 0, pt_comm_tag(PT_COMM_USER, 0, 1), &ack, 1, NULL);
    return NULL;
}

/* Rank 0 streams msgs messages to rank 1, which acknowledges the last. */
static double p2p_run(world *w, size_t floats, int msgs, int zero_copy, float *sbuf, float *rbuf)
{
    p2p_job j = {w, floats, msgs, zero_copy, {sbuf, rbuf}, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, p2p_receiver, &j);
    pt_comm *c = w->comm[0];
    pt_comm_zc zc;
    pt_comm_zc_init(&zc);
    double t0 = pt_clock_s();
    for (int i = 0; i < msgs; i++) {
        uint64_t tag = pt_comm_tag(PT_COMM_USER, (uint32_t)i, 0);
        if (zero_copy)
            j.rc |= pt_comm_send_zc(c, 1, tag, sbuf, floats, &zc, NULL);
        else
            j.rc |= pt_comm_send(c, 1, tag, sbuf, floats, NULL);
    }
    float ack;
    j.rc |= pt_comm_recv(c, 1, pt_comm_tag(PT_COMM_USER, 0, 1), &ack, 1, NULL);
    double t = pt_clock_s() - t0;
    j.rc |= pt_comm_zc_wait(&zc, TIMEOUT_MS);
    pthread_join(th, NULL);
    return j.rc ? -1.0 : t;
}

typedef struct ping_job {
    world *w;
    int n;
} ping_job;

static void *pong(void *arg)
{
    ping_job *j = arg;
    float v;
    for (int i = 0; i < j->n; i++) {
        if (pt_comm_recv(j->w->comm[1], 0, pt_comm_tag(PT_COMM_USER, (uint32_t)i, 2), &v, 1, NULL) <
                0 ||
            pt_comm_send(j->w->comm[1], 0, pt_comm_tag(PT_COMM_USER, (uint32_t)i, 3), &v, 1, NULL) <
                0)
            break;
    }
    return NULL;
}

/* Half the mean round trip of a 1-float message, in seconds. */
static double latency(world *w, int n)
{
    ping_job j = {w, n};
    pthread_t th;
    pthread_create(&th, NULL, pong, &j);
    float v = 1;
    double t0 = pt_clock_s();
    int ok = 1;
    for (int i = 0; i < n && ok; i++)
        ok = pt_comm_send(w->comm[0], 1, pt_comm_tag(PT_COMM_USER, (uint32_t)i, 2), &v, 1, NULL) ==
                 0 &&
             pt_comm_recv(w->comm[0], 1, pt_comm_tag(PT_COMM_USER, (uint32_t)i, 3), &v, 1, NULL) ==
                 0;
    double t = pt_clock_s() - t0;
    pthread_join(th, NULL);
    return ok ? t / n / 2 : -1.0;
}

/* ---- all-reduce -------------------------------------------------------------- */

typedef struct ar_job {
    world *w;
    size_t count;
    int reps;
    float *buf[MAX_P];
    double rep_seconds[64]; /* rank 0's time of each repetition */
    int rc[MAX_P];
} ar_job;

typedef struct ar_arg {
    ar_job *job;
    int rank;
} ar_arg;

static void *ar_thread(void *arg)
{
    ar_arg *a = arg;
    ar_job *j = a->job;
    int ranks[MAX_P];
    for (int r = 0; r < j->w->p; r++)
        ranks[r] = r;
    pt_comm_group g;
    pt_comm_group_init(&g, ranks, j->w->p);
    /* One warm-up, then the timed repetitions. */
    j->rc[a->rank] |=
        pt_comm_allreduce(j->w->comm[a->rank], &g, j->buf[a->rank], j->count, PT_COMM_SUM, NULL);
    for (int i = 0; i < j->reps; i++) {
        double t0 = pt_clock_s();
        j->rc[a->rank] |= pt_comm_allreduce(j->w->comm[a->rank], &g, j->buf[a->rank], j->count,
                                            PT_COMM_SUM, NULL);
        if (a->rank == 0)
            j->rep_seconds[i] = pt_clock_s() - t0;
    }
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double allreduce_time(world *w, size_t count, int reps)
{
    ar_job j;
    memset(&j, 0, sizeof j);
    j.w = w;
    j.count = count;
    j.reps = reps;
    pthread_t th[MAX_P];
    ar_arg args[MAX_P];
    for (int r = 0; r < w->p; r++) {
        j.buf[r] = calloc(count, sizeof(float));
        args[r] = (ar_arg){&j, r};
        pthread_create(&th[r], NULL, ar_thread, &args[r]);
    }
    int rc = 0;
    for (int r = 0; r < w->p; r++) {
        pthread_join(th[r], NULL);
        rc |= j.rc[r];
        free(j.buf[r]);
    }
    /* The median repetition: every rank leaves an all-reduce within one
     * message of the others, so rank 0's times stand for the group. */
    qsort(j.rep_seconds, (size_t)reps, sizeof j.rep_seconds[0], by_value);
    return rc ? -1.0 : j.rep_seconds[reps / 2];
}

/* ---- ranks as processes ------------------------------------------------------ */

/* What rank `rank` of a forked world does; its result goes to fd as one
 * proc_rec (rank 0's v is the figure; every rank may report its context
 * switches). */
typedef int proc_fn(pt_comm *c, int rank, int p, size_t count, int reps, int fd);

typedef struct proc_rec {
    int rank;
    double v;             /* the figure (rank 0's is returned) */
    double nvcsw, nivcsw; /* voluntary / involuntary context switches per repetition */
    double cpu;           /* CPU seconds (user + system) per repetition */
} proc_rec;

/* Rank averages of the last proc_run's context switches per repetition
 * (-1: no rank reported them). */
static double proc_nvcsw = -1, proc_nivcsw = -1, proc_cpu = -1;

static double tv_s(struct timeval t)
{
    return (double)t.tv_sec + t.tv_usec * 1e-6;
}

static int put_rec(int fd, int rank, double v, double nvcsw, double nivcsw, double cpu)
{
    proc_rec r = {rank, v, nvcsw, nivcsw, cpu};
    return write(fd, &r, sizeof r) == (ssize_t)sizeof r ? 0 : -1;
}

static int by_value(const void *a, const void *b);

/* A barrier: an all-reduce of one float (what MPI_Barrier costs, roughly). */
static int proc_barrier(pt_comm *c, pt_comm_group *g)
{
    float one = 0;
    return pt_comm_allreduce(c, g, &one, 1, PT_COMM_SUM, NULL);
}

static int proc_allreduce(pt_comm *c, int rank, int p, size_t count, int reps, int fd)
{
    int ranks[MAX_P];
    for (int r = 0; r < p; r++)
        ranks[r] = r;
    pt_comm_group g;
    pt_comm_group_init(&g, ranks, p);
    float *buf = calloc(count ? count : 1, sizeof(float));
    double t[PROBE_REPS_MAX];
    long vol = 0, invol = 0;
    double cpu = 0;
    int rc = buf ? 0 : -1;
    for (int i = -1; i < reps && rc == 0; i++) { /* -1: the warm-up */
        rc |= proc_barrier(c, &g);
        struct rusage u0, u1;
        getrusage(RUSAGE_SELF, &u0);
        double t0 = pt_clock_s();
        rc |= pt_comm_allreduce(c, &g, buf, count, PT_COMM_SUM, NULL);
        double t1 = pt_clock_s();
        getrusage(RUSAGE_SELF, &u1);
        if (i >= 0) {
            t[i] = t1 - t0;
            vol += u1.ru_nvcsw - u0.ru_nvcsw;
            invol += u1.ru_nivcsw - u0.ru_nivcsw;
            cpu += tv_s(u1.ru_utime) + tv_s(u1.ru_stime) - tv_s(u0.ru_utime) - tv_s(u0.ru_stime);
        }
    }
    free(buf);
    if (rc)
        return rc;
    qsort(t, (size_t)reps, sizeof t[0], by_value);
    return put_rec(fd, rank, t[reps / 2], (double)vol / reps, (double)invol / reps, cpu / reps);
}

/* Half the mean round trip of a 1-float message between ranks 0 and 1 of a
 * fresh world: count 0, after LAT_WARMUP untimed round trips (the first
 * message connects ZeroMQ, makes and announces the rings: milliseconds, and
 * up to ZeroMQ's 100 ms reconnect interval when a rank connects before its
 * peer has bound, which a mean over a few hundred round trips would carry);
 * count 1, that first round trip alone. */
static int proc_latency(pt_comm *c, int rank, int p, size_t count, int reps, int fd)
{
    (void)p;
    float v = 1;
    double t0 = pt_clock_s();
    int rc = 0, warm = count ? 1 : LAT_WARMUP, timed = count ? 0 : reps;
    for (int i = 0; i < warm + timed && rc == 0; i++) {
        if (i == warm)
            t0 = pt_clock_s();
        uint64_t ping = pt_comm_tag(PT_COMM_USER, (uint32_t)i, 2);
        uint64_t pong = pt_comm_tag(PT_COMM_USER, (uint32_t)i, 3);
        if (rank == 0)
            rc = pt_comm_send(c, 1, ping, &v, 1, NULL) | pt_comm_recv(c, 1, pong, &v, 1, NULL);
        else if (rank == 1)
            rc = pt_comm_recv(c, 0, ping, &v, 1, NULL) | pt_comm_send(c, 0, pong, &v, 1, NULL);
    }
    double half = (pt_clock_s() - t0) / (count ? 1 : reps) / (count ? 1 : 2);
    if (rc || rank != 0)
        return rc;
    return put_rec(fd, rank, half, -1, -1, -1);
}

/* Forks p ranks that talk over ipc endpoints with shared memory on (as local
 * agents do), runs fn in each, and returns rank 0's figure; -1 on failure.
 * Called while this process holds no ZeroMQ context (a fork copies none). */
static double proc_run(int p, proc_fn *fn, size_t count, int reps)
{
    char dir[64] = "/tmp/pt-comm-bench-XXXXXX", eps_s[MAX_P][128];
    const char *eps[MAX_P];
    int fds[2];
    if (!mkdtemp(dir))
        return -1;
    if (pipe(fds) != 0) {
        rmdir(dir);
        return -1;
    }
    for (int r = 0; r < p; r++) {
        snprintf(eps_s[r], sizeof eps_s[r], "ipc://%s/r%d", dir, r);
        eps[r] = eps_s[r];
    }
    fflush(stdout);
    pid_t pid[MAX_P];
    int started = 0;
    for (; started < p; started++) {
        pid[started] = fork();
        if (pid[started] < 0)
            break;
        if (pid[started] == 0) {
            close(fds[0]);
            pt_comm_config cfg = {.rank = started, .size = p, .timeout_ms = TIMEOUT_MS};
            pt_comm *c;
            int rc = pt_comm_open(&cfg, eps, &c, NULL);
            if (rc == 0) {
                rc = fn(c, started, p, count, reps, fds[1]);
                pt_comm_destroy(&c);
            }
            _exit(rc == 0 ? 0 : 1);
        }
    }
    close(fds[1]);
    double v = -1, vol = 0, invol = 0, cpu = 0;
    int counted = 0;
    proc_rec rec;
    /* Records are smaller than PIPE_BUF: each write is atomic; EOF once
     * every rank has exited. */
    while (started == p && read(fds[0], &rec, sizeof rec) == (ssize_t)sizeof rec) {
        if (rec.rank == 0)
            v = rec.v;
        if (rec.nvcsw >= 0) {
            vol += rec.nvcsw;
            invol += rec.nivcsw;
            cpu += rec.cpu;
            counted++;
        }
    }
    proc_nvcsw = counted ? vol / counted : -1;
    proc_nivcsw = counted ? invol / counted : -1;
    proc_cpu = counted ? cpu / counted : -1;
    close(fds[0]);
    for (int r = 0; r < started; r++) {
        int st;
        if (started < p)
            kill(pid[r], SIGTERM);
        if (waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            v = -1;
    }
    char sock[160];
    for (int r = 0; r < p; r++) { /* the ipc socket files the ranks bound */
        snprintf(sock, sizeof sock, "%s/r%d", dir, r);
        unlink(sock);
    }
    rmdir(dir);
    return v;
}

/* OpenMPI's all-reduce of each size, in ms, over shared memory (btl
 * self,vader), from one mpirun of the reference program; -1 where it could
 * not run (no MPI in the build, mpirun failed). */
static void mpi_allreduce_ms(int p, const size_t *sizes, int n, int reps, double *ms)
{
    for (int i = 0; i < n; i++)
        ms[i] = -1;
#if defined(PT_MPIEXEC) && defined(PT_MPI_ALLREDUCE)
    char cmd[1024];
    int len = snprintf(
        cmd, sizeof cmd, "%s%s -np %d --oversubscribe --bind-to none --mca btl self,vader %s %d",
        geteuid() == 0 ? "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " : "",
        PT_MPIEXEC, p, PT_MPI_ALLREDUCE, reps);
    for (int i = 0; i < n && len > 0 && (size_t)len < sizeof cmd; i++)
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %zu", sizes[i]);
    if (len <= 0 || (size_t)len + 16 >= sizeof cmd)
        return;
    snprintf(cmd + len, sizeof cmd - (size_t)len, " 2>/dev/null");
    FILE *f = popen(cmd, "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        int got_p;
        size_t floats;
        double t;
        if (sscanf(line, "mpi_allreduce p=%d floats=%zu median_ms=%lf", &got_p, &floats, &t) == 3)
            for (int i = 0; i < n; i++)
                if (got_p == p && floats == sizes[i])
                    ms[i] = t;
    }
    if (f)
        pclose(f);
#else
    (void)p;
    (void)sizes;
    (void)reps;
#endif
}

/* Seconds per byte of dst[i] += src[i] over n floats (the reduction). */
static double reduce_cost(size_t n)
{
    float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++)
        b[i] = (float)(i % 7);
    double t0 = pt_clock_s();
    for (int r = 0; r < REDUCE_REPS; r++)
        for (size_t i = 0; i < n; i++)
            a[i] += b[i];
    double t = (pt_clock_s() - t0) / REDUCE_REPS;
    volatile float sink = a[n / 2];
    (void)sink;
    free(a);
    free(b);
    return t / (double)(n * sizeof(float));
}

/* The 1-minute load average (-1 unknown), printed beside figures measured
 * on a shared machine. */
static double load1(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

/* --allreduce [REPS [P [MIB]]]: only the all-reduces between processes
 * (shm-proc) and MPI's beside them, 2 and 4 ranks (or P), 1 and 16 MiB (or
 * MIB), with the context switches and CPU time per all-reduce (rank
 * averages, getrusage) and the load average: the quick A/B of the small
 * all-reduce. */
static int allreduce_only(int reps, int p_only, int mib_only)
{
    size_t sizes[2] = {(size_t)1 << 18, (size_t)1 << 22};
    int nsizes = 2;
    if (mib_only > 0) {
        sizes[0] = (size_t)mib_only << 18;
        nsizes = 1;
    }
    printf("all-reduce between processes (shm-proc) against MPI_Allreduce, median of %d after a "
           "warm-up;\ncsw = voluntary / involuntary context switches per all-reduce, cpu = CPU "
           "ms per all-reduce\n(user + system), both rank averages (getrusage)\n",
           reps);
    printf("%2s %8s %10s %10s %9s %8s %8s %8s %6s\n", "p", "size", "ours ms", "MPI ms", "ours/MPI",
           "vol csw", "inv csw", "cpu ms", "load");
    for (int p = p_only ? p_only : 2; p <= (p_only ? p_only : MAX_P); p += 2) {
        double mpi[2];
        mpi_allreduce_ms(p, sizes, nsizes, reps, mpi);
        for (int si = 0; si < nsizes; si++) {
            double meas = proc_run(p, proc_allreduce, sizes[si], reps);
            printf("%2d %4zu MiB %10.3f %10.3f %9.2f %8.1f %8.1f %8.3f %6.2f\n", p, sizes[si] >> 18,
                   meas * 1e3, mpi[si], meas > 0 && mpi[si] > 0 ? meas * 1e3 / mpi[si] : -1.0,
                   proc_nvcsw, proc_nivcsw, proc_cpu * 1e3, load1());
            fflush(stdout);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--allreduce")) {
        int reps = argc > 2 ? atoi(argv[2]) : AR_REPS;
        int p = argc > 3 ? atoi(argv[3]) : 0, mib = argc > 4 ? atoi(argv[4]) : 0;
        if (reps < 1 || reps > PROBE_REPS_MAX || (argc > 3 && (p < 2 || p > MAX_P)) ||
            (argc > 4 && (mib < 1 || mib > 256))) {
            fprintf(stderr,
                    "usage: comm_bandwidth --allreduce [REPS (1..%d) [RANKS (2..%d) [MIB "
                    "(1..256)]]]\n",
                    PROBE_REPS_MAX, MAX_P);
            return 2;
        }
        return allreduce_only(reps, p, mib);
    }
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    long long target = quick ? TARGET_BYTES / 8 : TARGET_BYTES;
    float *sbuf = malloc(MAX_BYTES), *rbuf = malloc(MAX_BYTES);
    if (!sbuf || !rbuf)
        return 1;
    for (size_t i = 0; i < MAX_BYTES / sizeof(float); i++)
        sbuf[i] = (float)i;

    double lat[T_COUNT], bw_seg[T_COUNT] = {0};
    printf("point-to-point bandwidth (GB/s = 1e9 bytes/s of payload), 2 threads streaming, best "
           "of %d after a warm-up; zc = zero-copy send\n",
           P2P_TRIES);
    printf("%-8s", "size");
    for (int t = 0; t < T_COUNT; t++)
        printf("  %9s %9s", tname[t], "zc");
    printf("\n");
    world w[T_COUNT];
    for (int t = 0; t < T_COUNT; t++)
        if (world_open(&w[t], 2, (transport)t) < 0)
            return 1;
    for (size_t bytes = MIN_BYTES; bytes <= MAX_BYTES; bytes *= 4) {
        long long n = target / (long long)bytes;
        int msgs = (int)(n < MIN_MSGS ? MIN_MSGS : n > MAX_MSGS ? MAX_MSGS : n);
        if (bytes >= 1 << 20)
            printf("%4zu MiB", bytes >> 20);
        else
            printf("%4zu KiB", bytes >> 10);
        for (int t = 0; t < T_COUNT; t++)
            for (int zc = 0; zc < 2; zc++) {
                /* A warm-up fills the send-buffer pool; then the best of
                 * P2P_TRIES, as other processes share the cores. */
                double best = -1;
                for (int k = 0; k <= P2P_TRIES; k++) {
                    double s = p2p_run(&w[t], bytes / sizeof(float), msgs, zc, sbuf, rbuf);
                    if (k > 0 && s > 0 && (best < 0 || s < best))
                        best = s;
                }
                double gbs = best > 0 ? (double)bytes * msgs / best / 1e9 : -1;
                printf("  %9.2f", gbs);
                if (!zc && bytes == PT_COMM_SEGMENT_FLOATS * sizeof(float))
                    bw_seg[t] = gbs * 1e9;
            }
        printf("\n");
        fflush(stdout);
    }
    printf("\nlatency (half a round trip of one float)\n");
    for (int t = 0; t < T_COUNT; t++) {
        lat[t] = latency(&w[t], quick ? PINGS / 4 : PINGS);
        printf("  %-8s %7.1f us\n", tname[t], lat[t] * 1e6);
        world_close(&w[t]);
    }
    double lat_proc = proc_run(2, proc_latency, 0, quick ? PINGS / 4 : PINGS);
    printf("  %-8s %7.1f us   (shm, each rank a process, after %d untimed round trips)\n",
           "shm-proc", lat_proc * 1e6, LAT_WARMUP);
    double first = proc_run(2, proc_latency, 1, 1);
    printf("  %-8s %7.2f ms   (the first round trip of a fresh world: connect, rings)\n",
           "shm-proc", first * 1e3);

    size_t sizes[2] = {(size_t)1 << 18, (size_t)1 << 22}; /* 1 MiB and 16 MiB of floats */
    double gamma = reduce_cost(sizes[1]);
    printf("\nreduction cost g = %.3f ns/byte (dst += src, one thread)\n", gamma * 1e9);
    printf("\nring all-reduce, median of %d after a warm-up; model T = 2(p-1)a + 2(p-1)/p n/b + "
           "(p-1)/p n g\n(a = latency above, b = bandwidth at %d KiB messages, the ring's "
           "segment)\n",
           quick ? AR_REPS / 2 : AR_REPS, (int)(PT_COMM_SEGMENT_FLOATS * sizeof(float) / 1024));
    int ar_reps = quick ? AR_REPS / 2 + 1 : AR_REPS;
    double mpi_ms[MAX_P + 1][2];
    for (int p = 2; p <= MAX_P; p += 2)
        mpi_allreduce_ms(p, sizes, 2, ar_reps, mpi_ms[p]);
    printf(
        "MPI = OpenMPI's MPI_Allreduce, p processes over shared memory (btl self,vader), same "
        "statistic;\nours/MPI = measured / MPI (n/a: the build found no MPI or mpirun failed)\n");
    printf("%-8s %2s %8s %12s %12s %7s %9s %9s\n", "transport", "p", "size", "measured ms",
           "model ms", "ratio", "MPI ms", "ours/MPI");
    for (int p = 2; p <= 4; p += 2)
        for (int si = 0; si < 2; si++) {
            size_t count = sizes[si];
            double n = (double)count * sizeof(float);
            double meas = proc_run(p, proc_allreduce, count, ar_reps);
            double model = 2.0 * (p - 1) * lat_proc + 2.0 * (p - 1) / p * n / bw_seg[T_SHM] +
                           (double)(p - 1) / p * n * gamma;
            printf("%-9s %2d %5zu MiB %12.2f %12.2f %7.2f", "shm-proc", p, (size_t)(n / (1 << 20)),
                   meas * 1e3, model * 1e3, meas / model);
            double mpi = mpi_ms[p][si];
            if (mpi > 0)
                printf(" %9.2f %9.2f\n", mpi, meas > 0 ? meas * 1e3 / mpi : -1.0);
            else
                printf(" %9s %9s\n", "n/a", "n/a");
            fflush(stdout);
        }
    for (int t = 0; t < T_COUNT; t++)
        for (int p = 2; p <= 4; p += 2)
            for (int si = 0; si < 2; si++) {
                world aw;
                if (world_open(&aw, p, (transport)t) < 0)
                    return 1;
                size_t count = sizes[si];
                double n = (double)count * sizeof(float);
                double meas = allreduce_time(&aw, count, ar_reps);
                world_close(&aw);
                double model = 2.0 * (p - 1) * lat[t] + 2.0 * (p - 1) / p * n / bw_seg[t] +
                               (double)(p - 1) / p * n * gamma;
                printf("%-9s %2d %5zu MiB %12.2f %12.2f %7.2f", tname[t], p,
                       (size_t)(n / (1 << 20)), meas * 1e3, model * 1e3, meas / model);
                double mpi = mpi_ms[p][si];
                if (mpi > 0)
                    printf(" %9.2f %9.2f\n", mpi, meas * 1e3 / mpi);
                else
                    printf(" %9s %9s\n", "n/a", "n/a");
                fflush(stdout);
            }
    free(sbuf);
    free(rbuf);
    return 0;
}
