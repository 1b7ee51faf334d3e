/* Arena accounting (current/peak per category and in total), block reuse,
 * limits, trimming, thread safety; tensor views. */
#include <pthread.h>
#include <stdint.h>

#include "runtime/tensor.h"
#include "tests/test.h"

static void test_kind_names(void)
{
    for (int k = 0; k < PT_MEM_KIND_COUNT; k++) {
        REQUIRE(pt_mem_kind_name((pt_mem_kind)k) != NULL);
        for (int j = 0; j < k; j++)
            CHECK(strcmp(pt_mem_kind_name((pt_mem_kind)k), pt_mem_kind_name((pt_mem_kind)j)));
    }
    CHECK(strcmp(pt_mem_kind_name(PT_MEM_ACTS), "acts") == 0);
    CHECK(pt_mem_kind_name(PT_MEM_KIND_COUNT) == NULL);
}

static void test_accounting(void)
{
    pt_arena *a = NULL;
    REQUIRE(pt_arena_create(NULL, &a) == 0);
    pt_mem_stats st;
    void *w = pt_arena_alloc(a, PT_MEM_WEIGHTS, 1000);
    void *g = pt_arena_alloc(a, PT_MEM_GRADS, 1000);
    void *x1 = pt_arena_alloc(a, PT_MEM_ACTS, 300);
    void *x2 = pt_arena_alloc(a, PT_MEM_ACTS, 500);
    REQUIRE(w && g && x1 && x2);
    CHECK(((uintptr_t)w % 64) == 0 && ((uintptr_t)x1 % 64) == 0);
    pt_arena_stats(a, &st);
    CHECK(st.current[PT_MEM_WEIGHTS] == 1000 && st.current[PT_MEM_GRADS] == 1000);
    CHECK(st.current[PT_MEM_ACTS] == 800 && st.peak[PT_MEM_ACTS] == 800);
    CHECK(st.total_current == 2800 && st.total_peak == 2800);
    CHECK(st.reserved == 2800 && st.backend_allocs == 4);

    CHECK(pt_arena_free(a, x1) == 0);
    pt_arena_stats(a, &st);
    CHECK(st.current[PT_MEM_ACTS] == 500 && st.peak[PT_MEM_ACTS] == 800);
    CHECK(st.total_current == 2500 && st.total_peak == 2800);
    CHECK(st.reserved == 2800); /* cached, not returned */

    /* the cached block serves the next request of its size, any category */
    void *c = pt_arena_alloc(a, PT_MEM_COMM, 300);
    CHECK(c == x1);
    pt_arena_stats(a, &st);
    CHECK(st.backend_allocs == 4 && st.current[PT_MEM_COMM] == 300);
    CHECK(st.total_peak == 2800);
    void *d = pt_arena_alloc(a, PT_MEM_STASH, 301);
    CHECK(d && d != x1);
    pt_arena_stats(a, &st);
    CHECK(st.backend_allocs == 5 && st.total_peak == 3101 && st.peak[PT_MEM_STASH] == 301);

    /* the total peak is the highest total, not the sum of the peaks */
    pt_arena_free(a, d);
    pt_arena_free(a, c);
    pt_arena_reset_peaks(a);
    void *e = pt_arena_alloc(a, PT_MEM_OPTIM, 301);
    pt_arena_free(a, e);
    void *f = pt_arena_alloc(a, PT_MEM_COMM, 300);
    pt_arena_stats(a, &st);
    CHECK(st.peak[PT_MEM_OPTIM] == 301 && st.peak[PT_MEM_COMM] == 300);
    CHECK(st.total_peak == 2500 + 301);

    /* errors: foreign pointer, double free; NULL is fine */
    int local;
    CHECK(pt_arena_free(a, &local) == PT_EINVAL);
    CHECK(pt_arena_free(a, f) == 0);
    CHECK(pt_arena_free(a, f) == PT_EINVAL);
    CHECK(pt_arena_free(a, NULL) == 0);
    CHECK(pt_arena_alloc(a, PT_MEM_KIND_COUNT, 8) == NULL);

    /* trim returns cached blocks only */
    pt_arena_stats(a, &st);
    int64_t live = st.total_current;
    pt_arena_trim(a);
    pt_arena_stats(a, &st);
    CHECK(st.reserved == live && st.total_current == live);
    pt_arena_destroy(&a);
    CHECK(a == NULL);
    pt_arena_destroy(&a); /* NULL-safe */
}

static void test_limit(void)
{
    pt_arena *a = NULL;
    REQUIRE(pt_arena_create(pt_backend_cpu(), &a) == 0);
    CHECK(pt_arena_backend(a) == pt_backend_cpu());
    pt_arena_set_limit(a, 1000);
    void *p = pt_arena_alloc(a, PT_MEM_WEIGHTS, 600);
    CHECK(p != NULL);
    CHECK(pt_arena_alloc(a, PT_MEM_ACTS, 600) == NULL);
    pt_mem_stats st;
    pt_arena_stats(a, &st);
    CHECK(st.current[PT_MEM_ACTS] == 0 && st.reserved == 600);
    /* a cached block of the right size is still handed out under the limit */
    pt_arena_free(a, p);
    CHECK(pt_arena_alloc(a, PT_MEM_ACTS, 600) == p);
    pt_arena_set_limit(a, 0);
    CHECK(pt_arena_alloc(a, PT_MEM_ACTS, 600) != NULL);
    pt_arena_destroy(&a);
}

static void test_tensor(void)
{
    pt_arena *a = NULL;
    REQUIRE(pt_arena_create(NULL, &a) == 0);
    pt_tensor t;
    int64_t dims[3] = {2, 3, 4};
    REQUIRE(pt_tensor_alloc(a, PT_MEM_ACTS, 3, dims, &t) == 0);
    CHECK(t.rank == 3 && pt_tensor_numel(&t) == 24 && t.dims[2] == 4);
    pt_mem_stats st;
    pt_arena_stats(a, &st);
    CHECK(st.current[PT_MEM_ACTS] == 24 * 4);
    pt_tensor_free(a, &t);
    CHECK(t.data == NULL && pt_tensor_numel(&t) == 0);
    pt_arena_stats(a, &st);
    CHECK(st.current[PT_MEM_ACTS] == 0);
    CHECK(pt_tensor_alloc(a, PT_MEM_ACTS, 0, dims, &t) == PT_EINVAL);
    CHECK(pt_tensor_alloc(a, PT_MEM_ACTS, PT_TENSOR_RANK_MAX + 1, dims, &t) == PT_EINVAL);
    dims[1] = -1;
    CHECK(pt_tensor_alloc(a, PT_MEM_ACTS, 3, dims, &t) == PT_EINVAL && t.data == NULL);
    CHECK(pt_tensor_numel(NULL) == 0);
    pt_arena_destroy(&a);
}

#define THREAD_ROUNDS 2000

static void *churn(void *arg)
{
    pt_arena *a = arg;
    for (int i = 0; i < THREAD_ROUNDS; i++) {
        void *p = pt_arena_alloc(a, PT_MEM_COMM, (size_t)(64 + (i % 5) * 64));
        void *q = pt_arena_alloc(a, PT_MEM_ACTS, 128);
        pt_arena_free(a, p);
        pt_arena_free(a, q);
    }
    return NULL;
}

/* Two threads allocating and freeing: the figures end where they began. */
static void test_threads(void)
{
    pt_arena *a = NULL;
    REQUIRE(pt_arena_create(NULL, &a) == 0);
    pthread_t t1, t2;
    REQUIRE(pthread_create(&t1, NULL, churn, a) == 0);
    REQUIRE(pthread_create(&t2, NULL, churn, a) == 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pt_mem_stats st;
    pt_arena_stats(a, &st);
    CHECK(st.total_current == 0 && st.current[PT_MEM_COMM] == 0);
    CHECK(st.peak[PT_MEM_ACTS] <= 2 * 128);
    CHECK(st.backend_allocs <= 2 * 6); /* at most one block per size per thread */
    pt_arena_destroy(&a);
}

PT_TEST_MAIN({"kind_names", test_kind_names}, {"accounting", test_accounting},
             {"limit", test_limit}, {"tensor", test_tensor}, {"threads", test_threads})
