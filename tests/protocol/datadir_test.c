/* protocol/datadir: a program in its build tree finds the source tree's data;
 * $PIPETOP_DATA is taken when the program is not in an install; names resolve
 * to <data>/<folder>/<name><ext>, paths stay as given, and a missing name is
 * PT_ENOTFOUND naming it and where it was looked for. (The install layout
 * itself is tests/install_test.sh.) */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/datadir.h"
#include "tests/test.h"

static void test_build_tree(void)
{
    unsetenv(PT_DATADIR_ENV);
    char dir[PT_DATADIR_PATH_MAX], real_src[PATH_MAX], real_dir[PATH_MAX];
    pt_error err = {0};
    REQUIRE(pt_datadir(dir, sizeof dir, &err) == 0);
    REQUIRE(getenv("PT_SOURCE_DIR"));
    REQUIRE(realpath(getenv("PT_SOURCE_DIR"), real_src) && realpath(dir, real_dir));
    CHECK_MSG(!strcmp(real_src, real_dir), "data folder %s, source tree %s", dir, real_src);
    char exe[PT_DATADIR_PATH_MAX];
    REQUIRE(pt_exe_dir(exe, sizeof exe) == 0);
    CHECK(exe[0] == '/');
    CHECK(pt_exe_dir(exe, 2) == PT_EIO);
}

static void test_env(void)
{
    setenv(PT_DATADIR_ENV, "/nonexistent/pipetop-data", 1);
    char dir[PT_DATADIR_PATH_MAX], path[PT_DATADIR_PATH_MAX];
    pt_error err = {0};
    CHECK(pt_datadir(dir, sizeof dir, &err) == 0);
    CHECK(!strcmp(dir, "/nonexistent/pipetop-data"));
    CHECK(pt_datadir_find("models", "fmnist-mlp", ".json", path, sizeof path, &err) ==
          PT_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "fmnist-mlp");
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/pipetop-data/models/fmnist-mlp.json");
    unsetenv(PT_DATADIR_ENV);
}

static void test_find(void)
{
    unsetenv(PT_DATADIR_ENV);
    char path[PT_DATADIR_PATH_MAX], want[PT_DATADIR_PATH_MAX], buf[PT_DATADIR_PATH_MAX];
    pt_error err = {0};
    REQUIRE(pt_datadir_find("topologies", "local-cpu-4", ".json", path, sizeof path, &err) == 0);
    snprintf(want, sizeof want, "%s/topologies/local-cpu-4.json", getenv("PT_SOURCE_DIR"));
    CHECK_MSG(!strcmp(path, want), "%s, want %s", path, want);
    /* a path is taken as given, found or not */
    CHECK(pt_datadir_find("topologies", "./no/such.json", ".json", path, sizeof path, &err) == 0);
    CHECK(!strcmp(path, "./no/such.json"));
    memset(&err, 0, sizeof err);
    CHECK(pt_datadir_find("themes", "no-such-theme", ".theme", path, sizeof path, &err) ==
          PT_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "no-such-theme");
    CHECK_STR_CONTAINS(err.msg, "themes/no-such-theme.theme");
    CHECK(pt_datadir_find("models", "", ".json", path, sizeof path, &err) == PT_EINVAL);
    CHECK(pt_datadir_find("models", "fmnist-mlp", ".json", path, 8, &err) == PT_EINVAL);
    /* resolve: the found path, else the name itself */
    CHECK(!strcmp(pt_datadir_resolve("profiles", "vgg16", ".json", buf, sizeof buf),
                  strcat(strcpy(want, getenv("PT_SOURCE_DIR")), "/profiles/vgg16.json")));
    CHECK(!strcmp(pt_datadir_resolve("profiles", "nope", ".json", buf, sizeof buf), "nope"));
}

PT_TEST_MAIN({"build_tree", test_build_tree}, {"env", test_env}, {"find", test_find})
