/* Shared-memory rings between two communicators on one host: the transport
 * runtime/comm.c uses between local ranks instead of a ZeroMQ socket (as
 * MPI's vader and NCCL's SHM transports do). See comm_internal.h.
 *
 * One ring per ordered pair (sender -> receiver), made by the sender in its
 * own 0700 folder (mkdtemp under /dev/shm): a file of one control page and a
 * power-of-two data area, mapped by both, plus two FIFOs for wake-ups (data
 * for the receiver, space for the sender). Single producer, single consumer:
 * head (bytes written) belongs to the sender, tail (bytes consumed) to the
 * receiver; each publishes with a release store and reads the other's with
 * an acquire load. A side that finds nothing to do sets its waiting flag,
 * looks once more and sleeps in poll(2) on its FIFO; the other side writes
 * one byte only when it finds the flag set (both with sequentially
 * consistent atomics, so one of the two always sees the other), so a busy
 * pipeline makes no system call per message and nothing ever spins.
 *
 * Records never wrap: one that does not fit before the end of the data area
 * is preceded by a PAD record to the end. Every record is 64-byte aligned; a
 * message is a MSG record (the 48-byte wire header, then its first piece)
 * followed by CONT records for the rest, each piece at most a quarter of the
 * ring, so messages larger than the ring stream through it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/comm_internal.h"

#define SHM_MAGIC 0x31535450u /* "PTS1" */
#define CTL_BYTES 4096
#define REC_ALIGN 64
#define REC_HDR   16
#define REC_MSG   1u
#define REC_CONT  2u
#define REC_PAD   3u
#define SHM_ROOT  "/dev/shm"
#define MIN_RING  (64u << 10)

typedef struct shm_ctl {
    uint32_t magic, version;
    uint64_t token, generation;
    uint32_t src, dst;
    uint64_t capacity;
    _Alignas(64) _Atomic uint64_t head;
    _Alignas(64) _Atomic uint64_t tail;
    _Alignas(64) atomic_int cons_waiting;
    _Alignas(64) atomic_int prod_waiting;
    atomic_int attached; /* the receiver mapped the ring (it removes the names) */
} shm_ctl;

_Static_assert(sizeof(shm_ctl) <= CTL_BYTES, "control block fits its page");
_Static_assert(PT_COMM_HEADER_BYTES + REC_HDR == REC_ALIGN, "payload starts aligned");

struct pt_shm_ring {
    int producer;
    shm_ctl *ctl;
    unsigned char *data;
    size_t cap, map_bytes;
    int data_fd, space_fd; /* FIFOs, both opened O_RDWR | O_NONBLOCK */
    char path[PT_SHM_PATH_MAX];
    uint64_t pending_tail; /* consumer: tail after the record last looked at */
    int defer, wake_due;   /* producer: wake-ups held back (pt_shm_ring_defer_wake) */
};

static size_t rec_size(size_t len)
{
    return (REC_HDR + len + REC_ALIGN - 1) / REC_ALIGN * REC_ALIGN;
}

static void put_rec(unsigned char *p, uint32_t type, uint64_t len)
{
    memcpy(p, &type, 4);
    memset(p + 4, 0, 4);
    memcpy(p + 8, &len, 8);
}

static void poke(int fd)
{
    unsigned char b = 1;
    /* EAGAIN: the FIFO is full of wake-ups already; the other side wakes. */
    ssize_t n = write(fd, &b, 1);
    (void)n;
}

static void drain_fd(int fd)
{
    unsigned char buf[64];
    /* A short read emptied the FIFO: no second read to hear EAGAIN. */
    while (read(fd, buf, sizeof buf) == (ssize_t)sizeof buf) {
    }
}

/* Removes the folders (and rings) that processes of this user left behind
 * when they were killed: "pipetop-comm-PID-XXXXXX" whose PID is gone. */
static void sweep_stale(void)
{
    DIR *d = opendir(SHM_ROOT);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid;
        char rest[16];
        if (sscanf(e->d_name, "pipetop-comm-%ld-%15s", &pid, rest) != 2 || pid <= 0 ||
            pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char sub[PT_SHM_PATH_MAX];
        snprintf(sub, sizeof sub, "%s/%.100s", SHM_ROOT, e->d_name);
        struct stat st;
        DIR *inner;
        if (lstat(sub, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
            !(inner = opendir(sub)))
            continue;
        struct dirent *f;
        while ((f = readdir(inner))) {
            char file[PT_SHM_PATH_MAX + 128];
            if (f->d_name[0] == '.')
                continue;
            snprintf(file, sizeof file, "%s/%.100s", sub, f->d_name);
            unlink(file);
        }
        closedir(inner);
        rmdir(sub);
    }
    closedir(d);
}

int pt_shm_make_dir(char *dir, size_t cap, pt_error *err)
{
    sweep_stale();
    if ((size_t)snprintf(dir, cap, "%s/pipetop-comm-%ld-XXXXXX", SHM_ROOT, (long)getpid()) >= cap)
        return pt_error_set(err, PT_EINVAL, "comm: shm folder name too long");
    if (!mkdtemp(dir)) /* mode 0700: no other user can open what is inside */
        return pt_error_set(err, PT_EIO, "comm: mkdtemp %s: %s", dir, strerror(errno));
    return 0;
}

/* Maps a ring with every page present: a page first touched in the middle
 * of a transfer costs a fault (and, in the sender, tmpfs zeroing it) per
 * 4 KiB, more than copying it. */
static void *map_ring(int fd, size_t bytes)
{
    int flags = MAP_SHARED;
#ifdef MAP_POPULATE
    flags |= MAP_POPULATE;
#endif
    return mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
}

static int open_fifo(const char *path, int create, pt_error *err)
{
    if (create && mkfifo(path, 0600) != 0)
        return pt_error_set(err, PT_EIO, "comm: mkfifo %s: %s", path, strerror(errno));
    /* O_RDWR: never blocks, never ENXIO, and the FIFO stays open for writers. */
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return pt_error_set(err, PT_EIO, "comm: open %s: %s", path, strerror(errno));
    return fd;
}

static void ring_free_names(const pt_shm_ring *r)
{
    char f[PT_SHM_PATH_MAX + 8];
    unlink(r->path);
    snprintf(f, sizeof f, "%s.d", r->path);
    unlink(f);
    snprintf(f, sizeof f, "%s.s", r->path);
    unlink(f);
}

static void ring_free(pt_shm_ring *r, int unlink_files)
{
    /* A sender that closes before its receiver mapped the ring leaves the
     * names while messages wait in it: the receiver, reading the hello
     * later (ZeroMQ delivers it at close), still finds them, maps the ring,
     * takes the messages and removes the names. Otherwise they go when the
     * folder's process is gone (sweep_stale). */
    if (unlink_files && r->producer && r->ctl && !atomic_load(&r->ctl->attached) &&
        atomic_load(&r->ctl->head) != atomic_load(&r->ctl->tail))
        unlink_files = 0;
    if (r->ctl)
        munmap(r->ctl, r->map_bytes);
    if (r->data_fd >= 0)
        close(r->data_fd);
    if (r->space_fd >= 0)
        close(r->space_fd);
    if (unlink_files && r->path[0])
        ring_free_names(r);
    free(r);
}

static pt_shm_ring *ring_alloc(void)
{
    pt_shm_ring *r = calloc(1, sizeof *r);
    if (r)
        r->data_fd = r->space_fd = -1;
    return r;
}

int pt_shm_ring_create(const char *dir, int src, int dst, uint64_t token, uint64_t generation,
                       size_t capacity, pt_shm_ring **out, pt_error *err)
{
    *out = NULL;
    size_t cap = MIN_RING;
    while (cap < capacity && cap < ((size_t)1 << 40))
        cap <<= 1;
    pt_shm_ring *r = ring_alloc();
    if (!r)
        return pt_error_set(err, PT_ENOMEM, "comm: out of memory");
    r->producer = 1;
    r->cap = cap;
    r->map_bytes = CTL_BYTES + cap;
    int rc;
    if ((size_t)snprintf(r->path, sizeof r->path, "%s/g%llu-r%d-to-r%d", dir,
                         (unsigned long long)generation, src, dst) >= sizeof r->path) {
        r->path[0] = '\0';
        rc = pt_error_set(err, PT_EINVAL, "comm: shm path too long in %s", dir);
        goto fail;
    }
    int fd = open(r->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = pt_error_set(err, PT_EIO, "comm: create %s: %s", r->path, strerror(errno));
        r->path[0] = '\0'; /* not ours to unlink */
        goto fail;
    }
    if (ftruncate(fd, (off_t)r->map_bytes) != 0) {
        rc = pt_error_set(err, PT_EIO, "comm: size %s to %zu bytes: %s", r->path, r->map_bytes,
                          strerror(errno));
        close(fd);
        goto fail;
    }
    void *m = map_ring(fd, r->map_bytes);
    close(fd);
    if (m == MAP_FAILED) {
        rc = pt_error_set(err, PT_EIO, "comm: mmap %s: %s", r->path, strerror(errno));
        goto fail;
    }
    r->ctl = m;
    r->data = (unsigned char *)m + CTL_BYTES;
    r->ctl->version = 1;
    r->ctl->token = token;
    r->ctl->generation = generation;
    r->ctl->src = (uint32_t)src;
    r->ctl->dst = (uint32_t)dst;
    r->ctl->capacity = cap;
    atomic_init(&r->ctl->head, 0);
    atomic_init(&r->ctl->tail, 0);
    atomic_init(&r->ctl->cons_waiting, 0);
    atomic_init(&r->ctl->prod_waiting, 0);
    atomic_init(&r->ctl->attached, 0);
    char f[PT_SHM_PATH_MAX + 8];
    snprintf(f, sizeof f, "%s.d", r->path);
    if ((r->data_fd = open_fifo(f, 1, err)) < 0) {
        rc = r->data_fd;
        goto fail;
    }
    snprintf(f, sizeof f, "%s.s", r->path);
    if ((r->space_fd = open_fifo(f, 1, err)) < 0) {
        rc = r->space_fd;
        goto fail;
    }
    atomic_thread_fence(memory_order_seq_cst);
    __atomic_store_n(&r->ctl->magic, SHM_MAGIC, __ATOMIC_RELEASE);
    *out = r;
    return 0;
fail:
    ring_free(r, 1);
    return rc;
}

int pt_shm_ring_attach(const char *path, int src, int dst, uint64_t token, uint64_t generation,
                       pt_shm_ring **out, pt_error *err)
{
    *out = NULL;
    if (strncmp(path, SHM_ROOT "/pipetop-comm-", strlen(SHM_ROOT "/pipetop-comm-")) ||
        strstr(path, "/..") || strlen(path) >= PT_SHM_PATH_MAX - 8)
        return pt_error_set(err, PT_EINVAL, "comm: shm path \"%.80s\" is not a ring of ours", path);
    pt_shm_ring *r = ring_alloc();
    if (!r)
        return pt_error_set(err, PT_ENOMEM, "comm: out of memory");
    int rc;
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        rc = pt_error_set(err, PT_EIO, "comm: open %s: %s (is the peer on another host?)", path,
                          strerror(errno));
        goto fail;
    }
    /* Only a regular file of our own user, nobody else's, is mapped. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077) || (size_t)st.st_size <= CTL_BYTES + MIN_RING - 1) {
        close(fd);
        rc = pt_error_set(err, PT_EINVAL, "comm: %s is not a ring made by this user", path);
        goto fail;
    }
    r->map_bytes = (size_t)st.st_size;
    void *m = map_ring(fd, r->map_bytes);
    close(fd);
    if (m == MAP_FAILED) {
        rc = pt_error_set(err, PT_EIO, "comm: mmap %s: %s", path, strerror(errno));
        goto fail;
    }
    r->ctl = m;
    r->data = (unsigned char *)m + CTL_BYTES;
    r->cap = r->map_bytes - CTL_BYTES;
    if (__atomic_load_n(&r->ctl->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC ||
        r->ctl->capacity != r->cap || (r->cap & (r->cap - 1)) || r->ctl->token != token ||
        r->ctl->generation != generation || r->ctl->src != (uint32_t)src ||
        r->ctl->dst != (uint32_t)dst) {
        rc = pt_error_set(err, PT_EINVAL,
                          "comm: %s is not the ring from rank %d to rank %d of this run", path, src,
                          dst);
        goto fail;
    }
    char f[PT_SHM_PATH_MAX + 8];
    snprintf(f, sizeof f, "%s.d", path);
    if ((r->data_fd = open_fifo(f, 0, err)) < 0) {
        rc = r->data_fd;
        goto fail;
    }
    snprintf(f, sizeof f, "%s.s", path);
    if ((r->space_fd = open_fifo(f, 0, err)) < 0) {
        rc = r->space_fd;
        goto fail;
    }
    r->pending_tail = atomic_load(&r->ctl->tail);
    atomic_store(&r->ctl->attached, 1);
    /* Both sides hold it now: remove the names, so a crash leaves nothing
     * in /dev/shm but the sender's empty folder (removed at its destroy). */
    snprintf(r->path, sizeof r->path, "%s", path);
    ring_free_names(r);
    r->path[0] = '\0';
    *out = r;
    return 0;
fail:
    ring_free(r, 0);
    return rc;
}

void pt_shm_ring_destroy(pt_shm_ring **r_p)
{
    if (!r_p || !*r_p)
        return;
    /* Both sides unlink: whichever goes first removes the names; the mapping
     * lives until the other side unmaps it too. */
    ring_free(*r_p, 1);
    *r_p = NULL;
}

int pt_shm_ring_wait_fd(const pt_shm_ring *r)
{
    return r->producer ? r->space_fd : r->data_fd;
}

/* ---- producer ----------------------------------------------------------------- */

/* Room for a record of len content bytes at head (with a PAD before it when
 * it would cross the end): the pointer to write it at, or NULL for now. */
static unsigned char *reserve(pt_shm_ring *r, size_t len, uint64_t *new_head)
{
    uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
    size_t need = rec_size(len), off = (size_t)(head & (r->cap - 1)), pad = 0;
    if (off && head == tail && need <= off) {
        /* Empty: start again at the front, so a ring that drains between
         * messages keeps reusing the same (cached) bytes. The PAD to the end
         * is published, then consumed here too (the receiver, finding it,
         * consumes it to the same count; it stores tail only after a record
         * it found, so this compare-and-swap from the empty count cannot
         * undo one of its stores): its bytes are free at once, not only
         * after the receiver looked. */
        uint64_t skip = head + (r->cap - off);
        put_rec(r->data + off, REC_PAD, r->cap - off - REC_HDR);
        atomic_store_explicit(&r->ctl->head, skip, memory_order_release);
        uint64_t expect = tail;
        atomic_compare_exchange_strong(&r->ctl->tail, &expect, skip);
        head = tail = skip;
        off = 0;
    }
    if (off + need > r->cap)
        pad = r->cap - off;
    if (head + pad + need - tail > r->cap)
        return NULL;
    if (pad) {
        put_rec(r->data + off, REC_PAD, pad - REC_HDR);
        off = 0;
    }
    *new_head = head + pad + need;
    return r->data + off;
}

static void publish(pt_shm_ring *r, uint64_t new_head)
{
    atomic_store_explicit(&r->ctl->head, new_head, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&r->ctl->cons_waiting) && atomic_exchange(&r->ctl->cons_waiting, 0)) {
        if (r->defer)
            r->wake_due = 1;
        else
            poke(r->data_fd);
    }
}

void pt_shm_ring_defer_wake(pt_shm_ring *r, int on)
{
    r->defer = on;
    if (!on && r->wake_due) {
        r->wake_due = 0;
        poke(r->data_fd);
    }
}

size_t pt_shm_ring_piece_max(const pt_shm_ring *r)
{
    return r->cap / 4 - REC_ALIGN;
}

static void fill_copy(void *src, unsigned char *dst, size_t off, size_t len)
{
    memcpy(dst, (const unsigned char *)src + off, len);
}

int pt_shm_ring_send(pt_shm_ring *r, const unsigned char *hdr, const void *payload, size_t bytes,
                     pt_shm_wait_fn *wait, void *arg)
{
    return pt_shm_ring_send_fill(r, hdr, bytes, fill_copy, (void *)(uintptr_t)payload, wait, arg);
}

int pt_shm_ring_send_fill(pt_shm_ring *r, const unsigned char *hdr, size_t bytes,
                          pt_shm_fill_fn *fill, void *fill_arg, pt_shm_wait_fn *wait, void *arg)
{
    size_t piece_max = pt_shm_ring_piece_max(r) / sizeof(float) * sizeof(float), done = 0;
    int first = 1;
    while (first || done < bytes) {
        size_t piece = bytes - done < piece_max ? bytes - done : piece_max;
        size_t len = (first ? PT_COMM_HEADER_BYTES : 0) + piece;
        uint64_t new_head;
        unsigned char *at;
        while (!(at = reserve(r, len, &new_head))) {
            /* Full: say so, look again, then let the caller wait (and make
             * progress on its own receives) until the consumer frees room. */
            atomic_store(&r->ctl->prod_waiting, 1);
            if ((at = reserve(r, len, &new_head)))
                break;
            /* The consumer may be asleep, or waiting for room itself and not
             * looking at this ring: wake it either way so it drains. */
            atomic_store(&r->ctl->cons_waiting, 0);
            poke(r->data_fd);
            int rc = wait(arg, r);
            drain_fd(r->space_fd);
            if (rc < 0) {
                atomic_store(&r->ctl->prod_waiting, 0);
                return rc;
            }
        }
        atomic_store_explicit(&r->ctl->prod_waiting, 0, memory_order_relaxed);
        put_rec(at, first ? REC_MSG : REC_CONT, len);
        unsigned char *dst = at + REC_HDR;
        if (first) {
            memcpy(dst, hdr, PT_COMM_HEADER_BYTES);
            dst += PT_COMM_HEADER_BYTES;
        }
        if (piece)
            fill(fill_arg, dst, done, piece);
        done += piece;
        first = 0;
        publish(r, new_head);
    }
    return 0;
}

/* ---- consumer ----------------------------------------------------------------- */

int pt_shm_ring_peek(pt_shm_ring *r, pt_shm_rec *rec)
{
    for (;;) {
        uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_relaxed);
        int rc = pt_shm_ring_peek_from(r, tail, rec);
        if (rc != PT_SHM_AGAIN)
            return rc;
    }
}

int pt_shm_ring_peek_from(pt_shm_ring *r, uint64_t tail, pt_shm_rec *rec)
{
    uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
    if (head == tail)
        return 0;
    size_t off = (size_t)(tail & (r->cap - 1));
    const unsigned char *at = r->data + off;
    uint32_t type;
    uint64_t len;
    memcpy(&type, at, 4);
    memcpy(&len, at + 8, 8);
    /* The producer may have moved tail itself (reserve's rewind of an empty
     * ring consumes its own PAD) since tail was read, and written new
     * records over the bytes at tail: what was read there is the record at
     * tail only if tail is still there now. Once it is, the producer cannot
     * move tail again while this record is unconsumed (it rewinds only an
     * empty ring), so the record stays valid until consumed. */
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&r->ctl->tail, memory_order_relaxed) != tail)
        return PT_SHM_AGAIN;
    /* The producer is trusted only as far as the mapping goes. */
    if (len > r->cap - off - REC_HDR || (type != REC_MSG && type != REC_CONT && type != REC_PAD))
        return PT_EPARSE;
    if (type == REC_PAD) {
        pt_shm_ring_consume_to(r, tail + r->cap - off);
        return PT_SHM_AGAIN;
    }
    rec->type = type == REC_MSG ? PT_SHM_MSG : PT_SHM_CONT;
    rec->data = at + REC_HDR;
    rec->len = (size_t)len;
    r->pending_tail = tail + rec_size((size_t)len);
    return 1;
}

void pt_shm_ring_consume(pt_shm_ring *r)
{
    pt_shm_ring_consume_to(r, r->pending_tail);
}

void pt_shm_ring_consume_to(pt_shm_ring *r, uint64_t tail)
{
    atomic_store_explicit(&r->ctl->tail, tail, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&r->ctl->prod_waiting) && atomic_exchange(&r->ctl->prod_waiting, 0))
        poke(r->space_fd);
}

int pt_shm_ring_prepare_sleep(pt_shm_ring *r)
{
    atomic_store(&r->ctl->cons_waiting, 1);
    /* Data published before the flag was seen: do not sleep. */
    uint64_t head = atomic_load(&r->ctl->head), tail = atomic_load(&r->ctl->tail);
    return head != tail;
}

void pt_shm_ring_woke(pt_shm_ring *r, int fd_ready)
{
    atomic_store(&r->ctl->cons_waiting, 0);
    if (fd_ready)
        drain_fd(r->data_fd);
}

int pt_shm_ring_readable(const pt_shm_ring *r)
{
    return atomic_load_explicit(&r->ctl->head, memory_order_acquire) !=
           atomic_load_explicit(&r->ctl->tail, memory_order_relaxed);
}

uint64_t pt_shm_ring_tail(const pt_shm_ring *r)
{
    return atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
}

uint64_t pt_shm_ring_peer_count(const pt_shm_ring *r)
{
    return atomic_load_explicit(r->producer ? &r->ctl->tail : &r->ctl->head, memory_order_acquire);
}

int pt_shm_ring_producer_waiting(const pt_shm_ring *r)
{
    return atomic_load(&r->ctl->prod_waiting);
}

const char *pt_shm_ring_path(const pt_shm_ring *r)
{
    return r->path;
}
