/* Fuzz harness for the console's theme and settings files (tui/export/theme.h,
 * tui/console/config.h). Properties, each an abort() when false: a refused input
 * leaves the defaults and an error naming the source; an accepted settings
 * file holds every value inside its documented range. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tui/console/config.h"
#include "tui/export/theme.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_theme: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    pt_theme t, def;
    pt_theme_default(&def);
    pt_error err = {0};
    if (pt_theme_parse(text, "fuzz", &t, &err) < 0) {
        if (memcmp(t.color, def.color, sizeof t.color) != 0)
            fail("a refused theme is not the default");
        if (strncmp(err.msg, "fuzz", 4) != 0)
            fail("the theme error does not name the source");
    }
    pt_config c, cdef;
    pt_config_default(&cdef);
    if (pt_config_parse(text, "fuzz", &c, &err) < 0) {
        if (memcmp(&c, &cdef, sizeof c) != 0)
            fail("a refused config is not the default");
        if (strncmp(err.msg, "fuzz", 4) != 0)
            fail("the config error does not name the source");
    } else if (c.refresh_hz < PT_CONFIG_REFRESH_MIN || c.refresh_hz > PT_CONFIG_REFRESH_MAX ||
               c.timeline_iters < 1 || c.timeline_iters > PT_CONFIG_ITERS_MAX ||
               !(c.replay_speed >= PT_CONFIG_SPEED_MIN && c.replay_speed <= PT_CONFIG_SPEED_MAX) ||
               !(c.straggler_pct >= PT_CONFIG_STRAGGLER_MIN &&
                 c.straggler_pct <= PT_CONFIG_STRAGGLER_MAX) ||
               !c.theme[0] || !c.planner[0] || (c.mouse != 0 && c.mouse != 1)) {
        fail("an accepted config holds a value out of range");
    }
    free(text);
    return 0;
}
