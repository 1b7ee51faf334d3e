/* Fuzz harness for the Fashion-MNIST IDX reader (libFuzzer, or replay_main.c
 * over the corpus). Each input is tried as the training images file (beside a
 * valid file of 10 labels) and as the labels file (beside 10 valid images),
 * plain and as-is (zlib reads both). Properties, each an abort() when false:
 * a refused input leaves no data set and an error that names the file; an
 * accepted one has 10 samples of 784 pixels in [0, 1] and labels below 10. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/data.h"

#define ITEMS 10
#define PX    784

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_idx: %s\n", what);
    abort();
}

static void put(const char *dir, const char *name, const void *data, size_t size)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        fail("cannot write the scratch folder");
    if (size && fwrite(data, 1, size, f) != size)
        fail("short write");
    fclose(f);
}

static void good_files(const char *dir)
{
    static unsigned char img[16 + ITEMS * PX], lab[8 + ITEMS];
    const unsigned char ih[16] = {0, 0, 8, 3, 0, 0, 0, ITEMS, 0, 0, 0, 28, 0, 0, 0, 28};
    const unsigned char lh[8] = {0, 0, 8, 1, 0, 0, 0, ITEMS};
    memcpy(img, ih, sizeof ih);
    memcpy(lab, lh, sizeof lh);
    for (int i = 0; i < ITEMS; i++)
        lab[8 + i] = (unsigned char)i;
    put(dir, "train-images-idx3-ubyte.gz", img, sizeof img);
    put(dir, "train-labels-idx1-ubyte.gz", lab, sizeof lab);
}

static void try_load(const char *dir, const char *replaced)
{
    pt_dataset *ds = NULL;
    pt_error err = {0};
    if (pt_dataset_fmnist_load(dir, PT_DATA_TRAIN, 0, &ds, &err) < 0) {
        if (ds)
            fail("refused input left a data set");
        if (!strstr(err.msg, dir))
            fail("error does not name the file");
        (void)replaced;
        return;
    }
    int64_t n = pt_dataset_count(ds);
    if (n < 1 || pt_dataset_input_elems(ds) != PX)
        fail("accepted data set has a bad shape");
    static float x[PX];
    for (int64_t i = 0; i < n; i++) {
        int32_t label;
        if (pt_dataset_get_batch(ds, &i, 1, x, &label) != 0 || label < 0 || label >= 10)
            fail("bad label");
        for (int p = 0; p < PX; p++)
            if (!(x[p] >= 0.0f && x[p] <= 1.0f))
                fail("pixel outside [0, 1]");
    }
    pt_dataset_free(&ds);
}

static char g_dir[64];

static void remove_scratch(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", g_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", g_dir);
    unlink(path);
    rmdir(g_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = g_dir;
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/pt_fuzz_idx.XXXXXX");
        if (!mkdtemp(g_dir))
            fail("mkdtemp");
        atexit(remove_scratch);
    }
    good_files(dir);
    put(dir, "train-images-idx3-ubyte.gz", data, size);
    try_load(dir, "images");
    good_files(dir);
    put(dir, "train-labels-idx1-ubyte.gz", data, size);
    try_load(dir, "labels");
    return 0;
}
