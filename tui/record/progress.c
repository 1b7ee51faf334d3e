#include "protocol/clock.h"
#include "tui/record/progress.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define LABEL_MAX      64
#define FIELDS_MAX     160
#define LINE_MAX_BYTES 512
/* The bar takes what is left of the line, within these bounds. */
#define BAR_MIN 10
#define BAR_MAX 40

struct pt_progress {
    FILE *out;
    int tty;
    int cols;
    char label[LABEL_MAX];
    int64_t total, done;
    double start_s, last_draw_s;
    int plain_next; /* next tenth to print in plain mode */
    char fields[FIELDS_MAX];
};

static void format_eta(char *out, size_t cap, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, cap, "%ld:%02ld", t / 60, t % 60);
}

void pt_progress_format(char *buf, size_t cap, int cols, const char *label, int64_t done,
                        int64_t total, double elapsed_s, const char *fields)
{
    if (cap == 0)
        return;
    if (total <= 0)
        total = 1;
    if (done < 0)
        done = 0;
    if (done > total)
        done = total;
    char tail[FIELDS_MAX + 64], eta[32] = "";
    if (done > 0 && done < total) {
        char t[24];
        format_eta(t, sizeof t, elapsed_s * (double)(total - done) / (double)done);
        snprintf(eta, sizeof eta, " ETA %s", t);
    } else if (done == total) {
        char t[24];
        format_eta(t, sizeof t, elapsed_s);
        snprintf(eta, sizeof eta, " in %s", t);
    }
    int pct = (int)(100 * done / total);
    snprintf(tail, sizeof tail, " %3d%% %lld/%lld%s%s%s", pct, (long long)done, (long long)total,
             fields && *fields ? "  " : "", fields ? fields : "", eta);
    int label_len = label && *label ? (int)strlen(label) + 1 : 0;
    int room = cols - 1 - label_len - (int)strlen(tail) - 2;
    int bar = room < BAR_MIN ? (room < 0 ? 0 : room) : (room > BAR_MAX ? BAR_MAX : room);
    char bar_s[BAR_MAX + 3] = "";
    if (bar >= BAR_MIN / 2) {
        int fill = (int)((int64_t)bar * done / total);
        bar_s[0] = '[';
        for (int i = 0; i < bar; i++)
            bar_s[1 + i] = i < fill ? '#' : '.';
        bar_s[1 + bar] = ']';
        bar_s[2 + bar] = '\0';
    }
    snprintf(buf, cap, "%s%s%s%s", label && *label ? label : "", label_len ? " " : "", bar_s, tail);
    /* Never wrap: a wrapped line breaks the in-place redraw. */
    if (cols > 1 && strlen(buf) > (size_t)cols - 1)
        buf[cols - 1] = '\0';
}

pt_progress *pt_progress_new(FILE *out, const char *label, int64_t total, int tty)
{
    pt_progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->out = out;
    p->tty = tty < 0 ? isatty(fileno(out)) : tty;
    p->cols = PT_PROGRESS_DEFAULT_COLS;
    struct winsize ws;
    if (p->tty && ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        p->cols = ws.ws_col;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    p->total = total > 0 ? total : 1;
    p->start_s = pt_clock_s();
    p->last_draw_s = -1;
    p->plain_next = 1;
    return p;
}

static void draw(pt_progress *p, double t, int final)
{
    char line[LINE_MAX_BYTES];
    pt_progress_format(line, sizeof line, p->tty ? p->cols : LINE_MAX_BYTES, p->label, p->done,
                       p->total, t - p->start_s, p->fields);
    if (p->tty)
        fprintf(p->out, "\r%s\033[K%s", line, final ? "\n" : "");
    else
        fprintf(p->out, "%s\n", line);
    fflush(p->out);
    p->last_draw_s = t;
}

void pt_progress_update(pt_progress *p, int64_t done, const char *fields)
{
    if (!p)
        return;
    p->done = done;
    if (fields)
        snprintf(p->fields, sizeof p->fields, "%s", fields);
    if (p->tty) {
        double t = pt_clock_s();
        if (p->last_draw_s < 0 || (t - p->last_draw_s) * 1000.0 >= PT_PROGRESS_REDRAW_MS)
            draw(p, t, 0);
        return;
    }
    /* Plain: a line each time another tenth is done (the last one by finish). */
    int tenth = (int)(PT_PROGRESS_PLAIN_STEPS * done / p->total);
    if (tenth >= p->plain_next && tenth < PT_PROGRESS_PLAIN_STEPS) {
        p->plain_next = tenth + 1;
        draw(p, pt_clock_s(), 0);
    }
}

void pt_progress_finish(pt_progress **p_p, const char *summary)
{
    if (!p_p || !*p_p)
        return;
    pt_progress *p = *p_p;
    if (summary)
        snprintf(p->fields, sizeof p->fields, "%s", summary);
    draw(p, pt_clock_s(), 1);
    free(p);
    *p_p = NULL;
}
