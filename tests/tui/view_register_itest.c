/* A view added through one file and one registration call: the "scratch"
 * view below (a class with its own state, one key and the default one-panel
 * layout) is registered with pt_view_register before the console starts,
 * and the real console, run in tmux, must show it: its tab in the header,
 * --view scratch starting on it, its key counting into its own state (kept
 * across a switch to another view and back), its hot key, its section in
 * the help, and a clean quit.
 *
 * The same program is both sides: with --console it registers the view and
 * runs `pipetop console` (pt_cmd_console) in-process; without, it drives
 * itself in a tmux server of its own. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/test.h"
#include "tui/cli/commands.h"
#include "tui/console/ui.h"
#include "tui/console/view.h"

/* ---- the view: this file and the registration call are all it takes ------ */

typedef struct scratch_view {
    int presses;
} scratch_view;

static void scratch_draw(pt_ui *ui, void *state)
{
    const pt_rect *r = pt_layout_find(&ui->layout, 0);
    if (!r)
        return;
    pt_rect in = pt_ui_box(ui, r, "scratch");
    pt_ui_text(in.y, in.x, in.w, ui->attr[PT_THEME_TEXT], 1, "scratch view: %d keys",
               ((scratch_view *)state)->presses);
}

static void scratch_count(pt_ui *ui, void *state, int ch)
{
    (void)ui, (void)ch;
    ((scratch_view *)state)->presses++;
}

static const pt_view_key scratch_keys[] = {
    {{'k'}, "k", "count a key press (the scratch view's own state)", scratch_count, NULL},
    {{0}, NULL, NULL, NULL, NULL},
};

static const pt_view_class scratch = {
    .name = "scratch",
    .hotkeys = "6",
    .hints = "k counts  ? help  q quit",
    .keys = scratch_keys,
    .state_size = sizeof(scratch_view),
    .draw = scratch_draw,
};

/* ---- the driver --------------------------------------------------------- */

#define WAIT_S       20
#define POLL_NS      100000000L
#define SCREEN_BYTES 16384

static char sock[64], dir[] = "/tmp/pt_view_register_XXXXXX";

static int tmux(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int tmux(const char *fmt, ...)
{
    char cmd[4096], args[3800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "tmux -L %s %s >/dev/null 2>&1", sock, args);
    return system(cmd);
}

static void capture(char *buf, size_t cap)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p -t t", sock);
    buf[0] = 0;
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = 0;
    pclose(p);
}

/* Polls the screen until it shows `text` (1) or WAIT_S pass (0). */
static int shows(const char *text)
{
    static char screen[SCREEN_BYTES];
    for (int i = 0; i < WAIT_S * 10; i++) {
        capture(screen, sizeof screen);
        if (strstr(screen, text))
            return 1;
        nanosleep(&(struct timespec){0, POLL_NS}, NULL);
    }
    fprintf(stderr, "--- waited for \"%s\"; the screen:\n%s\n", text, screen);
    return 0;
}

static void test_registered_view_shows(const char *self)
{
    REQUIRE(system("command -v tmux >/dev/null") == 0);
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(sock, sizeof sock, "ptview%d", (int)getpid());
    REQUIRE(tmux("-f /dev/null new-session -d -s t -x 110 -y 90 \"cd %s && env LANG=C.UTF-8 "
                 "TERM=xterm-256color XDG_CONFIG_HOME=%s/config %s --console --view scratch; "
                 "echo EXITED \\$?; sleep 600\"",
                 dir, dir, self) == 0);
    tmux("set-option -t t status off");
    CHECK(shows("scratch view: 0 keys")); /* --view found it; its draw ran */
    CHECK(shows("6 scratch"));            /* its tab, after the built-in ones */
    CHECK(shows("k counts  ? help"));     /* its hints in the status row */
    tmux("send-keys -t t k k k");
    CHECK(shows("scratch view: 3 keys")); /* its key table, its own state */
    tmux("send-keys -t t 1");
    CHECK(shows("re-simulated in")); /* the plan view (its summary's last line) */
    tmux("send-keys -t t 6");
    CHECK(shows("scratch view: 3 keys")); /* its hot key; the state kept */
    tmux("send-keys -t t '?'");
    CHECK(shows("scratch view (6)")); /* its section in the help */
    CHECK(shows("count a key press"));
    tmux("send-keys -t t Escape");
    CHECK(shows("scratch view: 3 keys"));
    tmux("send-keys -t t q");
    CHECK(shows("EXITED 0"));
    tmux("kill-server");
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    CHECK(system(rm) == 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--console")) {
        pt_error err = {0};
        if (pt_view_register(&scratch, &err) < 0) {
            fprintf(stderr, "view_register_itest: %s\n", err.msg);
            return 1;
        }
        return pt_cmd_console(argc - 1, argv + 1);
    }
    static char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = 0;
    test_registered_view_shows(self);
    tmux("kill-server"); /* after a REQUIRE too */
    printf("%s registered_view\n", pt_test_failures_ ? "FAIL" : "ok");
    return pt_test_failures_ != 0;
}
