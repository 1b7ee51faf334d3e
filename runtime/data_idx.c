/* Fashion-MNIST from IDX files (http://yann.lecun.com/exdb/mnist/ layout):
 * a big-endian header of magic (0x0000 08 NDIMS, 08 = unsigned byte), NDIMS
 * 32-bit sizes, then the bytes. Read through zlib so .gz and plain files
 * both work. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "runtime/data.h"
#include "runtime/data_impl.h"

#define IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dimension */
#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions */
#define IDX_MAX_DIMS     3
#define PATH_MAX_BYTES   4096
/* More images than this in one file is taken as a corrupt header. */
#define IDX_MAX_ITEMS 10000000u
/* The data is read into a buffer that starts this large and doubles. */
#define IDX_READ_CHUNK ((size_t)1 << 20)
#define FMNIST_PACKAGE "dataset-fashion-mnist"

typedef struct idx_file {
    uint32_t dims[IDX_MAX_DIMS];
    uint8_t *data; /* owned */
    size_t bytes;
} idx_file;

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* zlib's message without the "path: " it puts in front. */
static const char *gz_why(gzFile f, const char *path)
{
    int zerr = 0;
    const char *msg = gzerror(f, &zerr);
    size_t n = strlen(path);
    if (!strncmp(msg, path, n) && !strncmp(msg + n, ": ", 2))
        msg += n + 2;
    return msg;
}

/* Reads exactly len bytes; returns the count read (short on EOF) or -1 on a
 * zlib error, with its words in *why. */
static long long gz_read_full(gzFile f, const char *path, void *buf, size_t len, const char **why)
{
    size_t got = 0;
    while (got < len) {
        size_t chunk = len - got > (1u << 30) ? (1u << 30) : len - got;
        int n = gzread(f, (char *)buf + got, (unsigned)chunk);
        if (n < 0) {
            *why = gz_why(f, path);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (got < len) {
        int zerr = 0;
        gzerror(f, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END) {
            *why = gz_why(f, path);
            return -1;
        }
    }
    return (long long)got;
}

static int missing_file(const char *path, pt_error *err)
{
    return pt_error_set(err, PT_ENOTFOUND,
                        "%s: not found. Fashion-MNIST comes from the Debian package %s: run "
                        "`apt-get install %s` as root (or set %s to a folder holding the four "
                        "IDX files)",
                        path, FMNIST_PACKAGE, FMNIST_PACKAGE, PT_FMNIST_DIR_ENV);
}

/* Reads an IDX file of unsigned bytes with `ndims` dimensions. */
static int idx_read(const char *path, uint32_t magic, int ndims, idx_file *out, pt_error *err)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return missing_file(path, err);
        return pt_error_set(err, PT_EIO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) /* a FIFO would block gzopen; /dev/zero never ends */
        return pt_error_set(err, PT_EIO, "%s: not a regular file", path);
    gzFile f = gzopen(path, "rb");
    if (!f)
        return pt_error_set(err, PT_EIO, "%s: cannot open: %s", path, strerror(errno));
    int rc = 0;
    const char *why = NULL;
    unsigned char head[4 + 4 * IDX_MAX_DIMS];
    size_t head_len = 4 + 4 * (size_t)ndims;
    long long got = gz_read_full(f, path, head, head_len, &why);
    if (got < 0) {
        rc = pt_error_set(err, PT_EIO, "%s: not a readable gzip file: %s", path, why);
        goto done;
    }
    if (got < 4 || be32(head) != magic) {
        rc = got < 4 ? pt_error_set(err, PT_EPARSE, "%s: truncated: %lld bytes, no IDX header",
                                    path, got)
                     : pt_error_set(err, PT_EPARSE,
                                    "%s: bad magic number 0x%08x (expected 0x%08x, an IDX file "
                                    "of unsigned bytes with %d dimension%s)",
                                    path, be32(head), magic, ndims, ndims > 1 ? "s" : "");
        goto done;
    }
    if ((size_t)got < head_len) {
        rc = pt_error_set(err, PT_EPARSE, "%s: truncated header: %lld of %zu bytes", path, got,
                          head_len);
        goto done;
    }
    size_t total = 1;
    for (int d = 0; d < ndims; d++) {
        out->dims[d] = be32(head + 4 + 4 * d);
        if (out->dims[d] == 0 || out->dims[d] > IDX_MAX_ITEMS) {
            rc = pt_error_set(err, PT_EPARSE, "%s: dimension %d is %u, outside [1, %u]", path, d,
                              out->dims[d], IDX_MAX_ITEMS);
            goto done;
        }
        total *= out->dims[d];
    }
    if (total > (size_t)IDX_MAX_ITEMS * PT_FMNIST_SIDE_PX * PT_FMNIST_SIDE_PX) {
        rc = pt_error_set(err, PT_EPARSE, "%s: %zu bytes of data is too large", path, total);
        goto done;
    }
    /* the buffer grows with the data that arrives, so a small file whose
     * header promises gigabytes is refused as truncated without allocating
     * what it promised (at most twice what it holds) */
    size_t cap = total < IDX_READ_CHUNK ? total : IDX_READ_CHUNK, have = 0;
    out->data = malloc(cap + 1);
    while (out->data && have < total) {
        if (have == cap) {
            size_t nc = cap > total / 2 ? total : 2 * cap;
            uint8_t *nd = realloc(out->data, nc + 1);
            if (!nd)
                break;
            out->data = nd;
            cap = nc;
        }
        got = gz_read_full(f, path, out->data + have, cap - have, &why);
        if (got < 0) {
            rc = pt_error_set(err, PT_EIO, "%s: corrupt gzip data: %s", path, why);
            goto done;
        }
        int short_read = (size_t)got < cap - have;
        have += (size_t)got;
        if (short_read)
            break;
    }
    if (!out->data || (have < total && have == cap)) {
        rc = pt_error_set(err, PT_ENOMEM, "%s: out of memory for %zu bytes", path, total);
        goto done;
    }
    out->bytes = total;
    if (have < total) {
        rc = pt_error_set(err, PT_EPARSE,
                          "%s: truncated: the header promises %zu bytes of data, the file holds "
                          "%zu",
                          path, total, have);
        goto done;
    }
done:
    gzclose(f);
    if (rc < 0) {
        free(out->data);
        out->data = NULL;
    }
    return rc;
}

int pt_dataset_fmnist_load(const char *dir, pt_data_split split, int normalise, pt_dataset **out,
                           pt_error *err)
{
    *out = NULL;
    if (!dir)
        dir = getenv(PT_FMNIST_DIR_ENV);
    if (!dir || !*dir)
        dir = PT_FMNIST_DEFAULT_DIR;
    const char *prefix = split == PT_DATA_TRAIN ? "train" : "t10k";
    char img_path[PATH_MAX_BYTES], lab_path[PATH_MAX_BYTES];
    snprintf(img_path, sizeof img_path, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(lab_path, sizeof lab_path, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);

    idx_file img, lab;
    int rc = idx_read(img_path, IDX_MAGIC_IMAGES, 3, &img, err);
    if (rc < 0)
        return rc;
    rc = idx_read(lab_path, IDX_MAGIC_LABELS, 1, &lab, err);
    if (rc < 0) {
        free(img.data);
        return rc;
    }
    if (img.dims[1] != PT_FMNIST_SIDE_PX || img.dims[2] != PT_FMNIST_SIDE_PX) {
        rc = pt_error_set(err, PT_EPARSE, "%s: images are %ux%u pixels, expected %dx%d", img_path,
                          img.dims[1], img.dims[2], PT_FMNIST_SIDE_PX, PT_FMNIST_SIDE_PX);
        goto fail;
    }
    if (lab.dims[0] != img.dims[0]) {
        rc = pt_error_set(err, PT_EPARSE, "%s: %u labels for the %u images of %s", lab_path,
                          lab.dims[0], img.dims[0], img_path);
        goto fail;
    }
    for (uint32_t i = 0; i < lab.dims[0]; i++) {
        if (lab.data[i] >= PT_FMNIST_CLASSES) {
            rc = pt_error_set(err, PT_EPARSE, "%s: label %u of item %u is outside [0, %d)",
                              lab_path, lab.data[i], i, PT_FMNIST_CLASSES);
            goto fail;
        }
    }
    pt_dataset *ds = pt_data_alloc(DATA_IMAGES, split == PT_DATA_TRAIN ? "fashion-mnist train"
                                                                       : "fashion-mnist test");
    if (!ds) {
        rc = pt_error_set(err, PT_ENOMEM, "%s: out of memory", img_path);
        goto fail;
    }
    ds->count = img.dims[0];
    ds->input_elems = (int64_t)img.dims[1] * img.dims[2];
    ds->labels_per_sample = 1;
    ds->classes = PT_FMNIST_CLASSES;
    ds->pixels = img.data;
    ds->labels = lab.data;
    const float scale_01 = 1.0f / 255.0f;
    ds->pixel_scale = normalise ? scale_01 / PT_FMNIST_STD : scale_01;
    ds->pixel_shift = normalise ? -PT_FMNIST_MEAN / PT_FMNIST_STD : 0.0f;
    *out = ds;
    return 0;
fail:
    free(img.data);
    free(lab.data);
    return rc;
}
