/* Simulation-only and replay data sources (see source.h). */
#include "tui/record/source.h"

#include <stdio.h>
#include <stdlib.h>

#define SPEED_STEP 2.0 /* '>' and '<' multiply or divide the replay speed by this */

void pt_source_close(pt_source **src_p)
{
    if (!src_p || !*src_p)
        return;
    pt_source *s = *src_p;
    *src_p = NULL;
    s->vt->close(s);
}

/* ---- simulation only */

static int sim_poll(pt_source *src, pt_store *store, int64_t now_ns, int timeout_ms)
{
    (void)src, (void)store, (void)now_ns, (void)timeout_ms;
    return 0;
}

static void sim_describe(pt_source *src, char *buf, size_t cap)
{
    (void)src;
    snprintf(buf, cap, "simulation");
}

static void sim_close(pt_source *src)
{
    free(src);
}

static const pt_source_vt sim_vt = {"simulation", sim_poll, NULL,     NULL,
                                    sim_describe, NULL,     sim_close};

int pt_source_sim_new(pt_source **out)
{
    pt_source *s = calloc(1, sizeof *s);
    if (!s)
        return PT_ENOMEM;
    s->vt = &sim_vt;
    *out = s;
    return 0;
}

/* ---- replay */

typedef struct replay_src {
    pt_source base;
    pt_record *rec;
    pt_replay *player;
    pt_store *store; /* bound at the first poll */
    double speed;
    int start_paused, to_end;
} replay_src;

static const char *const replay_keys[][2] = {
    {"space", "pause / resume the replay"},
    {"n", "next step (pauses)"},
    {"> <", "replay faster / slower (x2)"},
    {"N", "one step back (pauses)"},
    {". ,", "next / previous plan generation (pauses at its start)"},
    {"R", "rewind to the start of the record (paused)"},
    {"e", "jump to the end of the record"},
    {NULL, NULL},
};

static int replay_poll(pt_source *src, pt_store *store, int64_t now_ns, int timeout_ms)
{
    (void)timeout_ms;
    replay_src *r = src->impl;
    if (!r->player) {
        if (pt_replay_new(r->rec, store, r->speed, &r->player) < 0)
            return PT_ENOMEM;
        r->store = store;
        pt_replay_advance(r->player, now_ns);
        if (r->to_end)
            pt_replay_to_end(r->player);
        if (r->start_paused || r->to_end)
            pt_replay_pause(r->player, 1, now_ns);
        return 1;
    }
    return pt_replay_advance(r->player, now_ns) > 0;
}

static int replay_key(pt_source *src, int ch, int64_t now_ns, char *msg, size_t cap)
{
    replay_src *r = src->impl;
    if (!r->player)
        return 0;
    switch (ch) {
    case ' ':
        pt_replay_pause(r->player, !pt_replay_paused(r->player), now_ns);
        snprintf(msg, cap, "replay %s", pt_replay_paused(r->player) ? "paused" : "resumed");
        return 1;
    case 'n':
        pt_replay_step(r->player, now_ns);
        snprintf(msg, cap, "replay: one step (paused)");
        return 1;
    case '>':
    case '<':
        pt_replay_set_speed(r->player,
                            ch == '>' ? pt_replay_speed(r->player) * SPEED_STEP
                                      : pt_replay_speed(r->player) / SPEED_STEP,
                            now_ns);
        snprintf(msg, cap, "replay speed %gx", pt_replay_speed(r->player));
        return 1;
    case 'e':
        pt_replay_to_end(r->player);
        pt_replay_pause(r->player, 1, now_ns);
        snprintf(msg, cap, "replay: at the end of the record");
        return 1;
    case 'N':
        pt_replay_step_back(r->player, now_ns);
        snprintf(msg, cap, "replay: one step back (paused)");
        return 1;
    case 'R':
        pt_replay_rewind(r->player, now_ns);
        snprintf(msg, cap, "replay: rewound to the start (paused; space plays)");
        return 1;
    case '.':
    case ',': {
        int64_t gen = 0, n = pt_replay_generation_count(r->player, NULL);
        if (pt_replay_seek_generation(r->player, ch == '.' ? 1 : -1, now_ns) < 0) {
            snprintf(msg, cap, "replay: no %s plan generation (%lld in the record)",
                     ch == '.' ? "later" : "earlier", (long long)n);
            return 1;
        }
        pt_replay_generation_count(r->player, &gen);
        snprintf(msg, cap, "replay: generation %lld of %lld (paused)", (long long)gen,
                 (long long)n);
        return 1;
    }
    default:
        return 0;
    }
}

static void replay_describe(pt_source *src, char *buf, size_t cap)
{
    replay_src *r = src->impl;
    int64_t n = pt_record_count(r->rec), pos = r->player ? pt_replay_position(r->player) : 0;
    int64_t gen = 0, gens = r->player ? pt_replay_generation_count(r->player, &gen) : 0;
    char gtext[48] = "";
    if (gens > 1) /* which plan generation is shown, once there are several */
        snprintf(gtext, sizeof gtext, " gen %lld/%lld", (long long)gen, (long long)gens);
    snprintf(buf, cap, "replay %gx %s %lld%%%s", r->player ? pt_replay_speed(r->player) : r->speed,
             r->player && pt_replay_done(r->player)     ? "end"
             : r->player && pt_replay_paused(r->player) ? "paused"
                                                        : "playing",
             (long long)(n ? pos * 100 / n : 100), gtext);
}

static void replay_close(pt_source *src)
{
    replay_src *r = src->impl;
    pt_replay_free(&r->player);
    pt_record_free(&r->rec);
    free(r);
}

static const pt_source_vt replay_vt = {"replay",        replay_poll, NULL,        replay_key,
                                       replay_describe, replay_keys, replay_close};

int pt_source_replay_new(pt_record *rec, double speed, int paused, int to_end, pt_source **out)
{
    replay_src *r = calloc(1, sizeof *r);
    if (!r)
        return PT_ENOMEM;
    r->base.vt = &replay_vt;
    r->base.impl = r;
    r->rec = rec;
    r->speed = speed > 0 ? speed : 1.0;
    r->start_paused = paused;
    r->to_end = to_end;
    *out = &r->base;
    return 0;
}
