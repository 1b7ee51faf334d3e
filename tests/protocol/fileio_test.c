/* File readers refuse what is not a regular file of bounded size, with the
 * path and the reason in the message (issue 13: /dev/zero, a FIFO, no cap:
 * OOM or a hang); the checked arithmetic of protocol/checked.h refuses exactly
 * the results that do not fit. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/checked.h"
#include "protocol/fileio.h"
#include "protocol/plan.h"
#include "tests/test.h"

static char dir[] = "/tmp/pt-fileio-XXXXXX";

static const char *in_dir(const char *name)
{
    static char path[256];
    static int made;
    if (!made && !(made = mkdtemp(dir) != NULL)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static void test_regular_file_read(void)
{
    pt_error err = {0};
    const char *path = in_dir("plain.txt");
    REQUIRE(pt_file_write_atomic(path, "hello\n", 6, &err) == 0);
    char *text = NULL;
    size_t len = 0;
    CHECK(pt_file_read(path, &text, &len, &err) == 0);
    CHECK(text && len == 6 && !strcmp(text, "hello\n"));
    free(text);
    /* an empty file is a regular file too */
    REQUIRE(pt_file_write_atomic(path, "", 0, &err) == 0);
    CHECK(pt_file_read(path, &text, &len, &err) == 0 && len == 0 && text && !text[0]);
    free(text);
}

/* /dev/zero never ends: refused at once, not read until memory runs out. */
static void test_device_refused(void)
{
    pt_error err = {0};
    char *text = (char *)1;
    CHECK(pt_file_read("/dev/zero", &text, NULL, &err) == PT_EIO);
    CHECK(text == NULL);
    CHECK_STR_CONTAINS(err.msg, "/dev/zero: not a regular file (a character device)");
    /* a plan named by the user goes through the same reader */
    pt_plan *p = NULL;
    CHECK(pt_plan_load("/dev/zero", &p, &err) == PT_EIO && p == NULL);
    CHECK_STR_CONTAINS(err.msg, "/dev/zero: not a regular file");
}

/* A FIFO with no writer would block open() forever without O_NONBLOCK; the
 * test itself would then hang, and ctest's timeout would fail it. */
static void test_fifo_refused(void)
{
    const char *path = in_dir("fifo");
    REQUIRE(mkfifo(path, 0600) == 0);
    pt_error err = {0};
    char *text = NULL;
    CHECK(pt_file_read(path, &text, NULL, &err) == PT_EIO && !text);
    CHECK_STR_CONTAINS(err.msg, "fifo: not a regular file (a FIFO)");
    unlink(path);
}

static void test_directory_refused(void)
{
    pt_error err = {0};
    char *text = NULL;
    CHECK(pt_file_read(in_dir("."), &text, NULL, &err) == PT_EIO && !text);
    CHECK_STR_CONTAINS(err.msg, "not a regular file (a directory)");
}

/* One byte over the cap is refused by its size before anything is read (the
 * file is sparse, so the test costs no disk). */
static void test_size_cap(void)
{
    const char *path = in_dir("big");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    int ok = ftruncate(fd, PT_FILE_READ_MAX + 1) == 0;
    close(fd);
    REQUIRE(ok);
    pt_error err = {0};
    char *text = NULL;
    CHECK(pt_file_read(path, &text, NULL, &err) == PT_ERANGE && !text);
    CHECK_STR_CONTAINS(err.msg, "big: 1073741825 bytes is above the limit of 1073741824 bytes");
    /* an explicit smaller cap, as the checkpoint reader passes */
    REQUIRE(truncate(path, 100) == 0);
    int f2 = -1;
    CHECK(pt_file_open_regular(path, 99, &f2, NULL, &err) == PT_ERANGE && f2 == -1);
    long long size = 0;
    CHECK(pt_file_open_regular(path, 100, &f2, &size, &err) == 0 && f2 >= 0 && size == 100);
    if (f2 >= 0)
        close(f2);
    unlink(path);
}

static void test_missing(void)
{
    pt_error err = {0};
    char *text = NULL;
    CHECK(pt_file_read(in_dir("nope"), &text, NULL, &err) == PT_ENOTFOUND && !text);
    CHECK_STR_CONTAINS(err.msg, "nope: No such file or directory");
}

static void test_checked_arithmetic(void)
{
    int64_t r = 7;
    CHECK(pt_mul_i64(1LL << 32, (1LL << 32) + 1, &r) < 0 && r == 7);
    CHECK(pt_mul_i64(1LL << 31, 1LL << 31, &r) == 0 && r == 1LL << 62);
    CHECK(pt_mul_i64(-(1LL << 32), 1LL << 31, &r) == 0 && r == INT64_MIN);
    CHECK(pt_add_i64(INT64_MAX, 1, &r) < 0);
    CHECK(pt_add_i64(INT64_MAX - 1, 1, &r) == 0 && r == INT64_MAX);
    CHECK(pt_sub_i64(INT64_MIN, 1, &r) < 0);
    CHECK(pt_sub_i64(1LL << 62, -(1LL << 62), &r) < 0);
    CHECK(pt_sub_i64(1LL << 62, -((1LL << 62) - 1), &r) == 0 && r == INT64_MAX);
    size_t z = 3;
    CHECK(pt_mul_size(SIZE_MAX / 2 + 1, 2, &z) < 0 && z == 3);
    CHECK(pt_add_size(SIZE_MAX, 1, &z) < 0);
    CHECK(pt_mul_sat_i64(1LL << 40, 1LL << 40) == INT64_MAX);
    CHECK(pt_mul_sat_i64(-(1LL << 40), 1LL << 40) == INT64_MIN);
    CHECK(pt_mul_sat_i64(3, 5) == 15);
    CHECK(pt_add_sat_i64(INT64_MAX, 5) == INT64_MAX);
    CHECK(pt_add_sat_i64(INT64_MIN, -5) == INT64_MIN);
    CHECK(pt_double_to_i64(1e300, INT64_MIN, INT64_MAX, &r) < 0);
    CHECK(pt_double_to_i64(-1e300, INT64_MIN, INT64_MAX, &r) < 0);
    CHECK(pt_double_to_i64(0x1p63, INT64_MIN, INT64_MAX, &r) < 0); /* INT64_MAX as double */
    CHECK(pt_double_to_i64(NAN, INT64_MIN, INT64_MAX, &r) < 0);
    CHECK(pt_double_to_i64(-0x1p63, INT64_MIN, INT64_MAX, &r) == 0 && r == INT64_MIN);
    CHECK(pt_double_to_i64(12.9, 0, 100, &r) == 0 && r == 12);
    CHECK(pt_double_to_i64(101, 0, 100, &r) < 0);
}

/* last: the folder is left empty by the tests before it */
static void test_cleanup(void)
{
    unlink(in_dir("plain.txt"));
    CHECK(rmdir(dir) == 0);
}

/* Paths from the wire: only folders inside a root pass (issue 13). */
static void test_path_inside(void)
{
    static const char *const ok[] = {".",   "ck",  "runs/r1/ckpt", "a/./b",
                                     "..x", "x..", "a/..b/c",      "ck/"};
    static const char *const bad[] = {"",     "/",      "/etc",    "..",     "../x",
                                      "a/..", "a/../b", "a//../b", "./../x", "a/b/../../.."};
    const char *why = NULL;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK_MSG(pt_path_check_inside(ok[i], &why) == 0, "\"%s\" refused: %s", ok[i], why);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(pt_path_check_inside(bad[i], &why) == PT_EINVAL, "\"%s\" passed", bad[i]);
        CHECK(why && why[0]);
    }
    char out[64];
    pt_error err = {0};
    CHECK(pt_path_join_inside("/r", "ck", out, sizeof out, &err) == 0 && !strcmp(out, "/r/ck"));
    CHECK(pt_path_join_inside("/r", ".", out, sizeof out, &err) == 0 && !strcmp(out, "/r"));
    CHECK(pt_path_join_inside("/r", "../x", out, sizeof out, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "\"../x\" has a \"..\" component: only a folder inside /r");
    char tiny[4];
    CHECK(pt_path_join_inside("/root", "ck", tiny, sizeof tiny, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "too long");
}

PT_TEST_MAIN({"regular_file_read", test_regular_file_read}, {"device_refused", test_device_refused},
             {"fifo_refused", test_fifo_refused}, {"directory_refused", test_directory_refused},
             {"size_cap", test_size_cap}, {"missing", test_missing},
             {"checked_arithmetic", test_checked_arithmetic}, {"path_inside", test_path_inside},
             {"cleanup", test_cleanup})
