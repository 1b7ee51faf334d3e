/* Fuzz harness for the profile parser (libFuzzer, or replay_main.c over the
 * corpus); the shared properties are in fuzz_format.h. */
#include "protocol/profile.h"
#include "tests/fuzz/fuzz_format.h"

static const char *check(const pt_profile *x)
{
    (void)x; /* the parser's own validation is the property; nothing more to derive */
    return NULL;
}

PT_FUZZ_FORMAT("profile", pt_profile, pt_profile_parse, pt_profile_to_json, pt_profile_free, check)
