/* Export speed on a large run record (issue 12 asks `pipetop export` of a
 * 100 MB record with --last 10 to take under 5 s). Builds a record of about
 * the size asked for by repeating a real record's telemetry frames with
 * steps, times and sequence numbers shifted (each copy a further stretch of
 * training), then times the real `pipetop export` on it: wall time and the
 * child's CPU time (on a shared machine wall time mostly measures the other
 * processes). Prints figures; never fails on time.
 *
 *   build/export_speed [--source RUN.ndjson] [--mb 100] [--last 10] [--full]
 *                      [--dir DIR] [--pipetop PATH]
 * --full also times the export of the whole record (trace and SVG). */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "protocol/clock.h"
#include "protocol/fileio.h"
#include "protocol/message.h"
#include "protocol/model.h"
#include "protocol/record.h"

extern char **environ;

#define MB           (1024.0 * 1024.0)
#define HEADER_BYTES 100 /* a frame line's header, about */
#define COPY_GAP_NS  1000000LL
#define PATH_CAP     4096
#define AGENTS_MAX   1024

static double child_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static double file_mb(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / MB : 0;
}

/* Writes dst: src's session and plans, then src's telemetry frames again and
 * again, shifted, until about target_mb. Returns the copies made or -1. */
static int build(const char *src, const char *dst, double target_mb)
{
    pt_record *rec = NULL;
    pt_error err = {0};
    if (pt_record_load(src, &rec, &err) < 0) {
        fprintf(stderr, "export_speed: %s\n", err.msg);
        return -1;
    }
    pt_record_summary sum;
    pt_record_summarize(rec, &sum);
    const pt_record_entry *s0 = pt_record_at(rec, 0);
    pt_record_session ses = {s0->control, s0->telemetry, s0->heartbeat_ms, s0->missed_heartbeats};
    pt_record_writer *w = NULL;
    if (pt_record_writer_open(dst, &ses, &w, &err) < 0) {
        fprintf(stderr, "export_speed: %s\n", err.msg);
        pt_record_free(&rec);
        return -1;
    }
    pt_record_writer_set_fold(w, NULL, 1); /* the record of issue 12: every frame verbatim */
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        if (e->kind != PT_RECORD_PLAN)
            continue;
        pt_model_spec *model = NULL;
        if (pt_model_spec_parse(e->model_json, "model", &model, NULL) < 0)
            continue;
        pt_record_plan p = {e->gen, e->plan, model, e->data,         e->seed,
                            NULL,   0,       0,     e->worker_count, e->workers};
        pt_record_write_plan(w, &p);
        pt_model_spec_free(&model);
    }
    int64_t steps = sum.last_step - sum.first_step + 1;
    int64_t span = sum.last_end_ns - sum.first_start_ns + COPY_GAP_NS;
    struct {
        char id[PT_MSG_ID_MAX];
        int64_t seq_max;
    } agents[AGENTS_MAX];
    int na = 0;
    for (int64_t i = 0; i < pt_record_count(rec); i++) {
        const pt_record_entry *e = pt_record_at(rec, i);
        pt_msg m;
        if (e->kind != PT_RECORD_RECV || strcmp(e->channel, "telemetry") ||
            pt_record_msg(rec, i, &m, NULL) < 0)
            continue;
        int k = 0;
        while (k < na && strcmp(agents[k].id, m.agent))
            k++;
        if (k == na && na < AGENTS_MAX)
            snprintf(agents[na++].id, PT_MSG_ID_MAX, "%s", m.agent);
        if (k < na && m.seq > agents[k].seq_max)
            agents[k].seq_max = m.seq;
        pt_msg_clear(&m);
    }
    double bytes = 0;
    int copies = 0;
    for (; bytes < target_mb * MB; copies++)
        for (int64_t i = 0; i < pt_record_count(rec); i++) {
            const pt_record_entry *e = pt_record_at(rec, i);
            pt_msg m;
            if (e->kind != PT_RECORD_RECV || strcmp(e->channel, "telemetry") ||
                pt_record_msg(rec, i, &m, NULL) < 0)
                continue;
            int k = 0;
            while (k < na && strcmp(agents[k].id, m.agent))
                k++;
            m.seq += copies * (k < na ? agents[k].seq_max + 1 : 0);
            if (m.type == PT_MSG_EVENTS)
                for (int j = 0; j < m.u.events.count; j++) {
                    m.u.events.events[j].step += copies * steps;
                    m.u.events.events[j].start_ns += copies * span;
                    m.u.events.events[j].end_ns += copies * span;
                }
            else if (m.type == PT_MSG_METRICS)
                m.u.metrics.step += copies * steps;
            else if (m.type == PT_MSG_HEARTBEAT)
                m.u.heartbeat.step += copies * steps;
            char *text = NULL;
            size_t len = 0;
            if (pt_msg_encode(&m, &text, &len, NULL) == 0) {
                pt_record_write_frame(w, PT_RECORD_RECV, "telemetry", e->offset_ns, text, len);
                bytes += (double)len + HEADER_BYTES;
            }
            free(text);
            pt_msg_clear(&m);
        }
    pt_record_writer_close(&w);
    pt_record_free(&rec);
    return copies;
}

/* Runs argv, returns its wall time (and CPU time in *cpu); -1 on failure. */
static double timed(char *const argv[], double *cpu)
{
    double c0 = child_cpu_s(), t0 = pt_clock_s();
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return -1;
    }
    posix_spawn_file_actions_destroy(&fa);
    int st = 0;
    waitpid(pid, &st, 0);
    double t = pt_clock_s() - t0;
    *cpu = child_cpu_s() - c0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t : -1;
}

int main(int argc, char **argv)
{
    const char *src = "tests/data/run-dapple4/run.ndjson", *dir = "export_speed.d";
    const char *pipetop = "./pipetop", *last = "10";
    double target = 100;
    int full = 0;
    char srcbuf[PATH_CAP];
    if (getenv("PT_SOURCE_DIR")) {
        snprintf(srcbuf, sizeof srcbuf, "%s/%s", getenv("PT_SOURCE_DIR"), src);
        src = srcbuf;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--source") && i + 1 < argc)
            src = argv[++i];
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc)
            target = atof(argv[++i]);
        else if (!strcmp(argv[i], "--last") && i + 1 < argc)
            last = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--pipetop") && i + 1 < argc)
            pipetop = argv[++i];
        else if (!strcmp(argv[i], "--full"))
            full = 1;
        else {
            fprintf(stderr,
                    "usage: export_speed [--source RUN.ndjson] [--mb 100] [--last 10] [--full] "
                    "[--dir DIR] [--pipetop PATH]\n");
            return 2;
        }
    }
    char rec[PATH_CAP], trace[PATH_CAP], svg[PATH_CAP];
    snprintf(rec, sizeof rec, "%s/run.ndjson", dir);
    snprintf(trace, sizeof trace, "%s/trace.json", dir);
    snprintf(svg, sizeof svg, "%s/trace.svg", dir);
    pt_mkdir_p(dir, NULL);
    double t0 = pt_clock_s();
    int copies = build(src, rec, target);
    if (copies < 0)
        return 1;
    printf("record: %s, %.1f MB (%d copies of %s), built in %.1f s\n", rec, file_mb(rec), copies,
           src, pt_clock_s() - t0);
    char *lastv[] = {(char *)pipetop, "export", rec,     "--last", (char *)last,
                     "--trace",       trace,    "--svg", svg,      NULL};
    double cpu = 0, t = timed(lastv, &cpu);
    if (t < 0) {
        fprintf(stderr, "export_speed: %s export failed\n", pipetop);
        return 1;
    }
    printf("export --last %s --trace --svg: %.2f s wall, %.2f s CPU; trace %.2f MB, svg %.2f MB\n",
           last, t, cpu, file_mb(trace), file_mb(svg));
    if (full) {
        char *allv[] = {(char *)pipetop, "export", rec, "--trace", trace, "--svg", svg, NULL};
        t = timed(allv, &cpu);
        printf("export (whole record) --trace --svg: %.2f s wall, %.2f s CPU; trace %.1f MB, svg "
               "%.2f MB\n",
               t, cpu, file_mb(trace), file_mb(svg));
    }
    return 0;
}
