/* Key files (protocol/keyfile.h): every tests/data/bad/keyfile/<case>.key is
 * refused with a message that starts with its path and holds <case>.expect;
 * a written pair parses back to itself; Z85 validation rejects what ZeroMQ's
 * decoder would. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/fileio.h"
#include "protocol/keyfile.h"
#include "tests/test.h"

#define PUB       "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
#define SEC       "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
#define MIN_CASES 10

static void test_bad_corpus(void)
{
    const char *dir = pt_test_path("tests/data/bad/keyfile");
    DIR *d = opendir(dir);
    REQUIRE(d);
    struct dirent *e;
    int cases = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".key"))
            continue;
        char path[600], expect_path[600], *expect = NULL;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(expect_path, sizeof expect_path, "%s/%.*s.expect", dir, (int)(n - 4), e->d_name);
        CHECK_MSG(pt_file_read(expect_path, &expect, NULL, NULL) == 0, "%s: no .expect", e->d_name);
        if (!expect)
            continue;
        expect[strcspn(expect, "\n")] = '\0';
        pt_keyfile k;
        pt_error err = {0};
        int rc = pt_keyfile_load(path, &k, &err);
        CHECK_MSG(rc < 0 && err.code == rc, "%s was accepted", e->d_name);
        CHECK_MSG(!strncmp(err.msg, path, strlen(path)) && strstr(err.msg, expect),
                  "%s: \"%s\" lacks \"%s\"", e->d_name, err.msg, expect);
        CHECK(k.public_z85[0] == 0 && !k.has_secret);
        free(expect);
        cases++;
    }
    closedir(d);
    CHECK_MSG(cases >= MIN_CASES, "only %d bad key files", cases);
}

static void test_round_trip(void)
{
    pt_keyfile k = {PUB, SEC, 1}, back;
    char text[512];
    pt_error err = {0};
    int n = pt_keyfile_format(&k, 1, text, sizeof text);
    REQUIRE(n > 0);
    CHECK(pt_keyfile_parse(text, (size_t)n, "k", &back, &err) == 0);
    CHECK(back.has_secret && !strcmp(back.public_z85, PUB) && !strcmp(back.secret_z85, SEC));
    n = pt_keyfile_format(&k, 0, text, sizeof text);
    REQUIRE(n > 0);
    CHECK(!strstr(text, SEC) && !strstr(text, "secret "));
    CHECK(pt_keyfile_parse(text, (size_t)n, "k", &back, &err) == 0 && !back.has_secret);
    CHECK(pt_keyfile_format(&k, 1, text, 20) == PT_ERANGE);
    /* CRLF, comments, blank lines and indentation are fine */
    const char *loose = "# c\r\n\r\n  pipetop-key 1\r\n\tpublic  " PUB "  \r\n";
    CHECK(pt_keyfile_parse(loose, strlen(loose), "k", &back, &err) == 0 &&
          !strcmp(back.public_z85, PUB));
    /* a NUL inside is refused, not cut short */
    const char nul[] = "pipetop-key 1\npublic " PUB "\0junk\n";
    CHECK(pt_keyfile_parse(nul, sizeof nul - 1, "k", &back, &err) == PT_EPARSE);
}

static void test_z85(void)
{
    CHECK(pt_key_z85_valid(PUB));
    CHECK(pt_key_z85_valid("0000000000000000000000000000000000000000"));
    CHECK(pt_key_z85_valid("%nSc0%nSc0%nSc0%nSc0%nSc0%nSc0%nSc0%nSc0"));  /* 2^32-1 groups */
    CHECK(!pt_key_z85_valid("%nSc1%nSc0%nSc0%nSc0%nSc0%nSc0%nSc0%nSc0")); /* 2^32 */
    CHECK(!pt_key_z85_valid(PUB "0"));
    CHECK(!pt_key_z85_valid(""));
    CHECK(!pt_key_z85_valid(NULL));
    CHECK(!pt_key_z85_valid("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf\""));
}

PT_TEST_MAIN({"bad_corpus", test_bad_corpus}, {"round_trip", test_round_trip}, {"z85", test_z85})
