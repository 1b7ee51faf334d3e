/* The host side of the GPU runtime, checked on any machine: device names
 * (cpu, cuda:N[:PREC]) parse, print back and open; a CUDA device that is not
 * there (or a build without CUDA) is refused with PT_EUNSUPP and a message
 * (CUDA's own words when it cannot count its devices), never taken for the
 * CPU, and the CPU backend never loads the CUDA module;
 * NCCL ids survive the hex of the assign message
 * byte for byte, bad hex is refused naming the position, and the console's
 * rule for using NCCL holds. */
#include <stdio.h>
#include <string.h>

#include "runtime/backend_cuda.h"
#include "runtime/backend_select.h"
#include "runtime/comm_nccl.h"
#include "runtime/cuda_module.h"
#include "tests/test.h"

static void test_parse_good(void)
{
    static const struct {
        const char *text, *canon;
        int cuda, index;
        pt_cuda_math math;
    } good[] = {{"cpu", "cpu", 0, 0, PT_CUDA_FP32},
                {"cuda", "cuda:0", 1, 0, PT_CUDA_FP32},
                {"cuda:0", "cuda:0", 1, 0, PT_CUDA_FP32},
                {"cuda:3", "cuda:3", 1, 3, PT_CUDA_FP32},
                {"cuda:1:tf32", "cuda:1:tf32", 1, 1, PT_CUDA_TF32},
                {"cuda:0:bf16", "cuda:0:bf16", 1, 0, PT_CUDA_BF16},
                {"cuda:2:fp32", "cuda:2", 1, 2, PT_CUDA_FP32},
                {"cuda:4095", "cuda:4095", 1, 4095, PT_CUDA_FP32}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        pt_device_spec d;
        pt_error err = {0};
        int rc = pt_device_spec_parse(good[i].text, &d, &err);
        CHECK_MSG(rc == 0, "%s: %s", good[i].text, err.msg);
        CHECK_MSG(d.cuda == good[i].cuda && d.index == good[i].index && d.math == good[i].math,
                  "%s: parsed as cuda %d index %d math %d", good[i].text, d.cuda, d.index,
                  (int)d.math);
        char buf[32];
        CHECK(pt_device_spec_format(&d, buf, sizeof buf) == (int)strlen(good[i].canon));
        CHECK_MSG(!strcmp(buf, good[i].canon), "%s printed as %s", good[i].text, buf);
    }
    pt_device_spec d = {1, 12, PT_CUDA_BF16};
    char tiny[6];
    CHECK(pt_device_spec_format(&d, tiny, sizeof tiny) == PT_ERANGE);
}

static void test_parse_bad(void)
{
    static const struct {
        const char *text, *why;
    } bad[] = {{"", "empty"},
               {"gpu", "want cpu, cuda"},
               {"cudax", "want cpu, cuda"},
               {"cpu:0", "want cpu, cuda"},
               {"cuda:", "device index must be a number"},
               {"cuda:x", "device index must be a number"},
               {"cuda:-1", "device index must be a number"},
               {"cuda:4096", "device index above 4095"},
               {"cuda:99999999999999999999", "device index above 4095"},
               {"cuda:1x", "want cuda:N or cuda:N:PREC"},
               {"cuda:1:", "want cuda:N or cuda:N:PREC"},
               {"cuda:1:fp16", "precision \"fp16\" is not fp32, tf32 or bf16"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pt_device_spec d;
        pt_error err = {0};
        CHECK_MSG(pt_device_spec_parse(bad[i].text, &d, &err) == PT_EINVAL, "%s accepted",
                  bad[i].text);
        CHECK_STR_CONTAINS(err.msg, bad[i].why);
    }
}

static void test_open(void)
{
    pt_device_spec cpu = {0};
    const pt_backend *be = NULL;
    REQUIRE(pt_device_open(&cpu, &be, NULL) == 0);
    CHECK(be == pt_backend_cpu());
    CHECK(!pt_backend_is_cuda(be) && pt_backend_cuda_device(be) == -1);
    CHECK(pt_backend_cuda_stream(be) == NULL);
    char name[64];
    pt_device_describe(be, name, sizeof name);
    CHECK(!strcmp(name, "cpu"));
    int64_t f = -1, t = -1;
    CHECK(pt_backend_cuda_mem_info(be, &f, &t) == PT_EUNSUPP);
    pt_device_close(&be);
    CHECK(be == NULL);
    CHECK(pt_cuda_device_bus_id(-1, name, sizeof name) == PT_EUNSUPP);
    CHECK(pt_cuda_error_count() == 0);
    /* nothing asked of the CPU backend loads the CUDA module (runtime/cuda_module.h) */
    CHECK(pt_cuda_module_loaded() == NULL);

    /* one past the visible devices is never there */
    pt_device_spec gone = {1, pt_cuda_device_count(), PT_CUDA_FP32};
    pt_error err = {0}, why = {0};
    CHECK(pt_device_open(&gone, &be, &err) == PT_EUNSUPP);
    CHECK(be == NULL);
    if (!pt_cuda_module_get(&why)) { /* not built, or it did not load: the open says why */
        CHECK(why.code < 0 && why.msg[0]);
        CHECK_STR_CONTAINS(err.msg, why.msg);
    } else if (pt_cuda_device_count() == 0) {
        /* CUDA's own words when it cannot count (no driver, one too old), "no
         * GPU visible" only when it counted none */
        pt_error probe = {0};
        if (pt_cuda_device_probe(&probe) < 0) {
            CHECK_STR_CONTAINS(probe.msg, "cuda: cudaGetDeviceCount: ");
            CHECK_STR_CONTAINS(err.msg, probe.msg);
            CHECK_MSG(!strstr(err.msg, "no GPU visible"), "%s", err.msg);
        } else {
            CHECK_STR_CONTAINS(err.msg, "no GPU visible");
        }
    } else {
        CHECK_STR_CONTAINS(err.msg, "no device");
    }
    CHECK(pt_cuda_module_loaded() == pt_cuda_module_get(NULL));
    CHECK(pt_cuda_device_name(pt_cuda_device_count(), name, sizeof name) == PT_EUNSUPP);
    CHECK(name[0] == '\0');
    CHECK(pt_cuda_device_bus_id(-1, name, sizeof name) == PT_EUNSUPP);
}

static void test_nccl_id_hex(void)
{
    unsigned char id[PT_NCCL_ID_BYTES], back[PT_NCCL_ID_BYTES];
    for (int i = 0; i < PT_NCCL_ID_BYTES; i++)
        id[i] = (unsigned char)(i * 37 + 11); /* every nibble value occurs */
    id[0] = 0x00;
    id[1] = 0xff;
    char hex[PT_NCCL_ID_HEX];
    REQUIRE(pt_nccl_id_encode(id, hex, sizeof hex) == 0);
    CHECK(strlen(hex) == 2 * PT_NCCL_ID_BYTES);
    CHECK(!strncmp(hex, "00ff", 4));
    REQUIRE(pt_nccl_id_decode(hex, back, NULL) == 0);
    CHECK(!memcmp(id, back, sizeof id));
    CHECK(pt_nccl_id_encode(id, hex, PT_NCCL_ID_HEX - 1) == PT_ERANGE);

    /* upper case is read too */
    char upper[PT_NCCL_ID_HEX];
    for (int i = 0; i < PT_NCCL_ID_HEX; i++)
        upper[i] = (char)(hex[i] >= 'a' && hex[i] <= 'f' ? hex[i] - 'a' + 'A' : hex[i]);
    REQUIRE(pt_nccl_id_decode(upper, back, NULL) == 0);
    CHECK(!memcmp(id, back, sizeof id));

    pt_error err = {0};
    CHECK(pt_nccl_id_decode(hex + 1, back, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "255 hex digits, want 256");
    char bad[PT_NCCL_ID_HEX];
    memcpy(bad, hex, sizeof bad);
    bad[77] = 'g';
    CHECK(pt_nccl_id_decode(bad, back, &err) == PT_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "character 77 is not a hex digit");
    CHECK(pt_nccl_id_decode(NULL, back, &err) == PT_EINVAL);
}

static void test_nccl_id_new(void)
{
    char a[PT_NCCL_ID_HEX], b[PT_NCCL_ID_HEX];
    pt_error err = {0};
    int rc = pt_nccl_id_new(a, sizeof a, &err);
    if (!pt_nccl_built()) {
        CHECK(rc == PT_EUNSUPP && a[0] == '\0');
        pt_error why = {0};
        if (pt_cuda_module_get(&why))
            CHECK_STR_CONTAINS(err.msg, "without NCCL");
        else
            CHECK_STR_CONTAINS(err.msg, why.msg);
        return;
    }
    REQUIRE(rc == 0);
    REQUIRE(pt_nccl_id_new(b, sizeof b, &err) == 0);
    unsigned char bytes[PT_NCCL_ID_BYTES];
    CHECK(pt_nccl_id_decode(a, bytes, NULL) == 0);
    CHECK_MSG(strcmp(a, b) != 0, "two ids are equal");
    CHECK(pt_nccl_id_new(a, PT_NCCL_ID_HEX - 1, &err) == PT_ERANGE);
    /* a communicator needs a CUDA backend */
    pt_nccl *c = (pt_nccl *)&err; /* must be reset to NULL */
    CHECK(pt_nccl_create(b, 1, 0, pt_backend_cpu(), &c, &err) == PT_EUNSUPP);
    CHECK(c == NULL);
    CHECK_STR_CONTAINS(err.msg, "needs a CUDA backend");
}

static void test_nccl_members(void)
{
    pt_nccl_member two[2] = {{"h1", "00000000:19:00.0", 1}, {"h1", "00000000:3B:00.0", 1}};
    CHECK(pt_nccl_members_ok(two, 2));
    CHECK(!pt_nccl_members_ok(two, 1)); /* one worker: nothing to communicate */
    pt_nccl_member same[2] = {{"h1", "00000000:19:00.0", 1}, {"h1", "00000000:19:00.0", 1}};
    CHECK(!pt_nccl_members_ok(same, 2));
    pt_nccl_member hosts[2] = {{"h1", "00000000:19:00.0", 1}, {"h2", "00000000:19:00.0", 1}};
    CHECK(pt_nccl_members_ok(hosts, 2)); /* the same slot on two nodes: two GPUs */
    pt_nccl_member cpu[2] = {{"h1", "00000000:19:00.0", 1}, {"h1", "", 0}};
    CHECK(!pt_nccl_members_ok(cpu, 2));
    pt_nccl_member nocap[2] = {{"h1", "00000000:19:00.0", 1}, {"h1", "00000000:3B:00.0", 0}};
    CHECK(!pt_nccl_members_ok(nocap, 2));
    pt_nccl_member nogpu[2] = {{"h1", NULL, 1}, {"h1", "00000000:3B:00.0", 1}};
    CHECK(!pt_nccl_members_ok(nogpu, 2));
    pt_nccl_member three[3] = {{"h1", "a", 1}, {"h1", "b", 1}, {"h1", "a", 1}};
    CHECK(!pt_nccl_members_ok(three, 3));
}

PT_TEST_MAIN({"parse_good", test_parse_good}, {"parse_bad", test_parse_bad}, {"open", test_open},
             {"nccl_id_hex", test_nccl_id_hex}, {"nccl_id_new", test_nccl_id_new},
             {"nccl_members", test_nccl_members})
