/* Fuzz harness for the plan parser (libFuzzer, or replay_main.c over the
 * corpus); the shared properties are in fuzz_format.h. */
#include "protocol/plan.h"
#include "tests/fuzz/fuzz_format.h"

static const char *check(const pt_plan *x)
{
    return pt_plan_check(x, NULL, NULL, "fuzz", NULL) != 0 ? "a parsed plan fails pt_plan_check"
                                                           : NULL;
}

PT_FUZZ_FORMAT("plan", pt_plan, pt_plan_parse, pt_plan_to_json, pt_plan_free, check)
