/* Replays a corpus through a libFuzzer harness without libFuzzer: every
 * regular file under the directories (or files) named on the command line,
 * recursively, is fed to LLVMFuzzerTestOneInput once. A harness reports a
 * bad outcome by crashing or aborting, which fails the test; an input the
 * parser refuses cleanly passes. Prints "N passed, 0 failed". */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Deeper than any corpus folder; stops symlink loops from recursing forever. */
#define REPLAY_DEPTH_MAX 32

static int passed;
static int failed; /* files that could not be read */

static void replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        failed++;
        return;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    passed++;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay(const char *path, int depth)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    if (S_ISREG(st.st_mode)) {
        replay_file(path);
        return;
    }
    if (!S_ISDIR(st.st_mode) || depth > REPLAY_DEPTH_MAX)
        return;
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    /* Sorted, so a crash points at the same file on every run. */
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn)
                break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(path) + strlen(names[i]) + 2;
        char *child = malloc(len);
        if (child) {
            snprintf(child, len, "%s/%s", path, names[i]);
            replay(child, depth + 1);
            free(child);
        }
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        replay(argv[i], 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed || passed == 0 ? 1 : 0;
}
