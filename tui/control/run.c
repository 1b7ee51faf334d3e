/* The run controller: session, agent processes, mapping, generations. See
 * tui/control/run.h. */
#include "protocol/clock.h"
#include "tui/control/run.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "protocol/fileio.h"
#include "protocol/keyfile.h"
#include "runtime/trust.h"
#include "tui/control/agent_spawn.h"
#include "tui/control/run_ckpt.h"

#define PATH_CAP     4096
#define NAME_CAP     32
#define POLL_MS      100 /* slice of a blocking wait between process checks */
#define REAP_POLL_MS 20  /* slice while agents leave */
#define NS_PER_MS    1000000LL
#define STAMP_FMT    "%Y%m%d-%H%M%S"
/* An ipc:// path must fit a sockaddr_un (108 bytes) with its file name. */
#define IPC_DIR_CAP     72
#define IPC_DIR_PATTERN "pipetop-XXXXXX"

struct pt_run {
    pt_session *s;
    pt_run_state state;
    char dir[PATH_CAP];
    int expect;
    /* spawned agents: names[k] (random per run, pt_run_agent_name) is pids[k] */
    pid_t *pids;
    char (*names)[NAME_CAP];
    int *exited;
    int nspawn;
    char failure[PT_ERROR_MAX]; /* an agent that ended before registering */
    pt_run_cancel_fn cancel;
    void *cancel_user;
    /* the last job, for a restart */
    const pt_model_spec *model;
    char data[PT_MSG_PATH_MAX];
    char ckpt_dir[PATH_CAP];
    int64_t seed, ckpt_every;
    int64_t first_step, target; /* of the current generation; target -1: until stopped */
    char keys_dir[PATH_CAP];    /* spawned agents' key pairs, "" none made */
    char ipc_dir[IPC_DIR_CAP];  /* local_ipc: the sockets' folder (0700), "" none */
    /* what spawned agents are given (pt_run_set_agents) */
    char agent_ckpt_root[PATH_CAP]; /* "" none */
    char observe_dir[PATH_CAP];     /* pt_run_set_observe ("" none) */
    pt_run_sim sim;                 /* pt_run_set_simulate (sim.profile NULL: none) */
    char sim_profile[PATH_CAP], sim_topology[PATH_CAP], sim_noise[32];
    char sim_straggler[64], sim_fail[64], sim_silence[16];
    int comm_timeout_ms; /* 0: the agent's default */
};

static const char *const state_names[PT_RUN_STATE_COUNT] = {
    "waiting", "ready", "assigned", "training", "finished", "stopped", "failed", "ended"};

const char *pt_run_state_name(pt_run_state state)
{
    return state >= 0 && state < PT_RUN_STATE_COUNT ? state_names[state] : "?";
}

int pt_run_dir_make(const char *dir, const char *tag, char *out, size_t cap, pt_error *err)
{
    int n;
    if (dir) {
        n = snprintf(out, cap, "%s", dir);
    } else {
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, STAMP_FMT, &tm);
        n = snprintf(out, cap, "%s/%s%s%s-%ld", PT_RUN_DIR_ROOT, stamp, tag && tag[0] ? "-" : "",
                     tag ? tag : "", (long)getpid());
    }
    if (n < 0 || (size_t)n >= cap)
        return pt_error_set(err, PT_EINVAL, "run folder %s: name too long", dir ? dir : "");
    int rc = pt_mkdir_p(out, err);
    /* one run per folder: a second would truncate the first's record while
     * it writes at its old offset, and overwrite its plan and profile */
    return rc < 0 ? rc : pt_dir_lock(out, err);
}

/* ---- agent processes */

/* Names for the agents a run spawns: w<k>-<12 hex digits from getrandom>,
 * so that nobody can guess and claim one before its agent registers (the
 * index keeps them apart on screen; stage and replica are shown beside). */
static int make_names(pt_run *r, pt_error *err)
{
    r->names = calloc((size_t)r->expect, sizeof *r->names);
    if (!r->names)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int k = 0; k < r->expect; k++) {
        unsigned char b[6];
        if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
            return pt_error_set(err, PT_EIO, "getrandom: %s", strerror(errno));
        snprintf(r->names[k], NAME_CAP, "w%d-%02x%02x%02x%02x%02x%02x", k, b[0], b[1], b[2], b[3],
                 b[4], b[5]);
    }
    return 0;
}

static void agent_name(const pt_run *r, int k, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", r->names && k >= 0 && k < r->expect ? r->names[k] : "?");
}

int pt_run_set_simulate(pt_run *r, const pt_run_sim *sim, pt_error *err)
{
    r->sim.profile = NULL;
    if (!sim || !sim->profile)
        return 0;
    if (!sim->topology)
        return pt_error_set(err, PT_EINVAL, "simulated agents: no topology file");
    snprintf(r->sim_profile, sizeof r->sim_profile, "%s", sim->profile);
    snprintf(r->sim_topology, sizeof r->sim_topology, "%s", sim->topology);
    snprintf(r->sim_noise, sizeof r->sim_noise, "%.6g", sim->noise);
    snprintf(r->sim_straggler, sizeof r->sim_straggler, "%s", sim->straggler ? sim->straggler : "");
    snprintf(r->sim_fail, sizeof r->sim_fail, "%s", sim->fail ? sim->fail : "");
    snprintf(r->sim_silence, sizeof r->sim_silence, "%d",
             sim->console_silence_ms > 0 ? sim->console_silence_ms : 0);
    r->sim = *sim;
    r->sim.profile = r->sim_profile;
    r->sim.topology = r->sim_topology;
    return 0;
}

const char *pt_run_agent_name(const pt_run *r, int k)
{
    return r && r->names && k >= 0 && k < r->nspawn ? r->names[k] : NULL;
}

void pt_run_set_observe(pt_run *r, const char *dir)
{
    snprintf(r->observe_dir, sizeof r->observe_dir, "%s", dir ? dir : "");
}

int pt_run_spawn(pt_run *r, const int *devices, pt_error *err)
{
    return pt_run_spawn_on(r, devices, NULL, err);
}

/* 1 when devices (NULL: 0..n-1) are exactly 0..n-1, the devices
 * `pipetop-agent --simulate --count n` registers by default. */
static int devices_in_order(const int *devices, int n)
{
    for (int k = 0; devices && k < n; k++)
        if (devices[k] != k)
            return 0;
    return 1;
}

/* pt_run_set_simulate: one pipetop-agent --simulate --count N process for
 * every agent; its agents are named <base>-<k>, base random per run as
 * make_names's, and share one key pair to which the console binds all of
 * their names (and no others). */
static int spawn_simulated(pt_run *r, const char *bin, const int *devices, pt_error *err)
{
    unsigned char b[6];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return pt_error_set(err, PT_EIO, "getrandom: %s", strerror(errno));
    char base[NAME_CAP], log[PATH_CAP + 64], kbase[PATH_CAP + 64], key_file[PATH_CAP + 80];
    snprintf(base, sizeof base, "sim-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5]);
    for (int k = 0; k < r->expect; k++)
        snprintf(r->names[k], NAME_CAP, "%.20s-%d", base, k);
    int rc, curve = r->keys_dir[0] != '\0';
    if (curve) {
        pt_keyfile kp;
        snprintf(kbase, sizeof kbase, "%.4000s/%s", r->keys_dir, base);
        snprintf(key_file, sizeof key_file, "%s.key", kbase);
        if ((rc = pt_trust_keypair(&kp, err)) < 0 ||
            (rc = pt_keyfile_write_pair(kbase, &kp, 1, err)) < 0)
            return rc;
        for (int k = 0; k < r->expect; k++)
            if ((rc = pt_session_allow(r->s, kp.public_z85, r->names[k], err)) < 0)
                return rc;
    }
    snprintf(log, sizeof log, "%.4000s/agent-%s.log", r->dir, base);
    char count[16];
    snprintf(count, sizeof count, "%d", r->expect);
    const char *more[16] = {"--simulate", "--count",       count,     "--profile", r->sim.profile,
                            "--topology", r->sim.topology, "--noise", r->sim_noise};
    int m = 9;
    if (r->sim_straggler[0]) {
        more[m++] = "--straggler";
        more[m++] = r->sim_straggler;
    }
    if (r->sim_fail[0]) {
        more[m++] = "--fail";
        more[m++] = r->sim_fail;
    }
    if (r->sim.console_silence_ms > 0) {
        more[m++] = "--console-silence-ms";
        more[m++] = r->sim_silence;
    }
    pt_agent_spawn_extra x = {curve ? key_file : NULL,
                              r->agent_ckpt_root[0] ? r->agent_ckpt_root : NULL,
                              0,
                              NULL,
                              NULL,
                              NULL,
                              more};
    /* devices other than 0..N-1: every agent registers none, and the mapping
     * gives each one worker in order of registration */
    int first = devices_in_order(devices, r->expect) ? 0 : -1;
    if ((rc = pt_agent_spawn(bin, r->s, base, first, 1, log, &x, &r->pids[0], err)) < 0)
        return rc;
    r->nspawn = r->expect; /* pids[k > 0] stay 0: the process is reaped as agent 0 */
    return 0;
}

int pt_run_spawn_on(pt_run *r, const int *devices, const pt_topology *topo, pt_error *err)
{
    if (r->nspawn || r->pids)
        return pt_error_set(err, PT_ESTATE, "run: agents were started already");
    char bin[PATH_CAP + 32];
    int rc = pt_agent_binary(bin, sizeof bin, err);
    if (rc < 0)
        return rc;
    r->pids = calloc((size_t)r->expect, sizeof *r->pids);
    r->exited = calloc((size_t)r->expect, sizeof *r->exited);
    if (!r->pids || !r->exited)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    if ((rc = make_names(r, err)) < 0)
        return rc;
    int threads = pt_agent_threads(r->expect);
    int curve = pt_session_public_key(r->s)[0] != '\0';
    if (curve) {
        snprintf(r->keys_dir, sizeof r->keys_dir, "%.4000s/%s", r->dir, PT_RUN_KEYS_DIR);
        if (mkdir(r->keys_dir, 0700) != 0 && errno != EEXIST)
            return pt_error_set(err, PT_EIO, "%s: %s", r->keys_dir, strerror(errno));
        if (chmod(r->keys_dir, 0700) != 0)
            return pt_error_set(err, PT_EIO, "chmod %s: %s", r->keys_dir, strerror(errno));
    }
    fflush(stdout);
    fflush(stderr);
    if (r->sim.profile)
        return spawn_simulated(r, bin, devices, err);
    for (int k = 0; k < r->expect; k++) {
        char name[NAME_CAP], log[PATH_CAP + 64];
        agent_name(r, k, name, sizeof name);
        snprintf(log, sizeof log, "%.4000s/agent-%s.log", r->dir, name);
        char base[PATH_CAP + 64], key_file[PATH_CAP + 80];
        if (curve) {
            /* a pair of its own per agent and run: the console allows exactly
             * these keys and binds each name to its key */
            pt_keyfile kp;
            snprintf(base, sizeof base, "%.4000s/%s", r->keys_dir, name);
            snprintf(key_file, sizeof key_file, "%s.key", base);
            if ((rc = pt_trust_keypair(&kp, err)) < 0 ||
                (rc = pt_keyfile_write_pair(base, &kp, 1, err)) < 0 ||
                (rc = pt_session_allow(r->s, kp.public_z85, name, err)) < 0)
                return rc;
        }
        char data_ep[IPC_DIR_CAP + NAME_CAP + 16];
        snprintf(data_ep, sizeof data_ep, "ipc://%s/%s%s", r->ipc_dir, name, PT_RUN_IPC_DATA_EXT);
        int dev = devices ? devices[k] : k;
        char spec[PT_TOPOLOGY_COMPUTE_MAX + PT_TOPOLOGY_PRECISION_MAX + 2];
        int gpu = pt_topology_device_is_gpu(topo, dev) &&
                  pt_topology_device_spec(topo, dev, spec, sizeof spec) > 0;
        pt_agent_spawn_extra x = {curve ? key_file : NULL,
                                  r->agent_ckpt_root[0] ? r->agent_ckpt_root : NULL,
                                  r->comm_timeout_ms,
                                  r->ipc_dir[0] ? data_ep : NULL,
                                  gpu ? spec : NULL,
                                  r->observe_dir[0] ? r->observe_dir : NULL,
                                  NULL};
        if ((rc = pt_agent_spawn(bin, r->s, name, dev, threads, log, &x, &r->pids[k], err)) < 0)
            return rc;
        r->nspawn = k + 1;
    }
    return 0;
}

int pt_run_set_agents(pt_run *r, int stall_ms, const char *checkpoint_root, pt_error *err)
{
    if (stall_ms < 0)
        return pt_error_set(err, PT_EINVAL, "stall bound: %d ms is negative", stall_ms);
    int stall = stall_ms ? stall_ms : PT_RUN_STALL_MS;
    pt_session_set_stall_ms(r->s, stall);
    /* a neighbour waits out the whole stall, and the console's notice of
     * its end, before its own receive gives up */
    int64_t hb_bound = (int64_t)PT_SESSION_MISSED_HEARTBEATS * PT_SESSION_HEARTBEAT_MS;
    int64_t comm = (int64_t)pt_session_stall_ms(r->s) + 2 * hb_bound;
    r->comm_timeout_ms = comm > INT32_MAX ? INT32_MAX : (int)comm;
    r->agent_ckpt_root[0] = '\0';
    pt_session_set_agent_checkpoint_dir(r->s, checkpoint_root ? PT_RUN_AGENT_CKPT_DIR : NULL);
    if (!checkpoint_root)
        return 0;
    char *abs = realpath(checkpoint_root, NULL);
    if (!abs)
        return pt_error_set(err, PT_EIO, "checkpoint folder %s: %s", checkpoint_root,
                            strerror(errno));
    int n = snprintf(r->agent_ckpt_root, sizeof r->agent_ckpt_root, "%s", abs);
    free(abs);
    if (n < 0 || (size_t)n >= sizeof r->agent_ckpt_root) {
        r->agent_ckpt_root[0] = '\0';
        return pt_error_set(err, PT_EINVAL, "checkpoint folder %s: name too long", checkpoint_root);
    }
    return 0;
}

static void describe_status(int st, char *buf, size_t cap)
{
    if (WIFSIGNALED(st))
        snprintf(buf, cap, "its process was killed by signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    else if (WIFEXITED(st))
        snprintf(buf, cap, "its process exited with status %d", WEXITSTATUS(st));
    else
        snprintf(buf, cap, "its process ended");
}

/* Reaps spawned agents that ended; an end nobody asked for (expected 0)
 * marks the agent dead, or fails the run when it never registered. */
static void reap(pt_run *r, int expected)
{
    for (int k = 0; k < r->nspawn; k++) {
        if (r->exited[k] || r->pids[k] <= 0)
            continue;
        int st = 0;
        if (waitpid(r->pids[k], &st, WNOHANG) != r->pids[k])
            continue;
        r->exited[k] = 1;
        if (expected)
            continue;
        char name[NAME_CAP], why[128];
        agent_name(r, k, name, sizeof name);
        describe_status(st, why, sizeof why);
        int i = pt_session_find_agent(r->s, name);
        if (i >= 0)
            pt_session_mark_dead(r->s, i, why);
        else if (!r->failure[0])
            snprintf(r->failure, sizeof r->failure,
                     "agent %s (pid %ld) ended before registering: %s (see %.200s/agent-%s.log)",
                     name, (long)r->pids[k], why, r->dir, name);
    }
}

static int spawned_left(const pt_run *r)
{
    int left = 0;
    for (int k = 0; k < r->nspawn; k++)
        left += r->pids[k] > 0 && !r->exited[k];
    return left;
}

void pt_run_end(pt_run *r, const char *reason)
{
    if (!r || r->state == PT_RUN_ENDED)
        return;
    pt_session_bye(r->s, reason);
    int64_t end = pt_clock_ns() + PT_RUN_EXIT_MS * NS_PER_MS;
    for (;;) {
        pt_session_poll(r->s, REAP_POLL_MS, NULL);
        reap(r, 1);
        if (!spawned_left(r) || pt_clock_ns() > end)
            break;
    }
    for (int k = 0; k < r->nspawn; k++)
        if (r->pids[k] > 0 && !r->exited[k]) {
            kill(r->pids[k], SIGKILL);
            waitpid(r->pids[k], NULL, 0);
            r->exited[k] = 1;
        }
    /* no agent writes any more: what a failed or cut save left goes */
    if (r->ckpt_dir[0])
        pt_run_ckpt_sweep(r->ckpt_dir);
    r->state = PT_RUN_ENDED;
}

/* ---- the ipc folder */

/* Makes the run's socket folder: mkdtemp (mode 0700) under $XDG_RUNTIME_DIR
 * (a per-user tmpfs) when it is set and short enough, else /tmp. */
static int make_ipc_dir(pt_run *r, pt_error *err)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (!base || base[0] != '/' || strlen(base) + sizeof IPC_DIR_PATTERN + 1 > sizeof r->ipc_dir ||
        stat(base, &st) != 0 || !S_ISDIR(st.st_mode) || access(base, W_OK) != 0)
        base = "/tmp";
    snprintf(r->ipc_dir, sizeof r->ipc_dir, "%s/%s", base, IPC_DIR_PATTERN);
    if (!mkdtemp(r->ipc_dir)) {
        int e = errno;
        r->ipc_dir[0] = '\0';
        return pt_error_set(err, PT_EIO, "socket folder %s/%s: %s", base, IPC_DIR_PATTERN,
                            strerror(e));
    }
    return 0;
}

/* Empties and removes the socket folder: files the sockets left (an agent
 * that was killed does not unlink its own). */
static void remove_ipc_dir(pt_run *r)
{
    if (!r->ipc_dir[0])
        return;
    DIR *d = opendir(r->ipc_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                char path[IPC_DIR_CAP + 300];
                snprintf(path, sizeof path, "%s/%s", r->ipc_dir, e->d_name);
                unlink(path);
            }
        closedir(d);
    }
    rmdir(r->ipc_dir);
    r->ipc_dir[0] = '\0';
}

const char *pt_run_ipc_dir(const pt_run *r)
{
    return r ? r->ipc_dir : "";
}

/* ---- life */

/* The console's key pair (loaded, or made for this run) and the allow-list:
 * keys and the names they are bound to (agent=NAME, "" none). *allowed and
 * *names are malloc'd (NULL when none). */
static int load_trust(const pt_run_config *cfg, pt_keyfile *key, int *have_key,
                      char (**allowed)[PT_KEY_Z85_LEN + 1], char (**names)[PT_ALLOW_NAME_MAX],
                      int *allowed_n, pt_error *err)
{
    int rc = 0;
    *have_key = 0;
    if (cfg->key_path) {
        if ((rc = pt_keyfile_load(cfg->key_path, key, err)) < 0)
            return rc;
        if (!key->has_secret)
            return pt_error_set(err, PT_EINVAL,
                                "%s: holds no secret key (give the console its NAME.key, not "
                                "NAME.pub)",
                                cfg->key_path);
        *have_key = 1;
    } else if (cfg->local_keys || cfg->allow_path) {
        if ((rc = pt_trust_keypair(key, err)) < 0)
            return rc;
        *have_key = 1;
    }
    if (!cfg->allow_path)
        return 0;
    *allowed = calloc(PT_ZAP_ALLOW_MAX, sizeof **allowed);
    *names = calloc(PT_ZAP_ALLOW_MAX, sizeof **names);
    if (!*allowed || !*names)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    return pt_allowlist_load_named(cfg->allow_path, *allowed, *names, PT_ZAP_ALLOW_MAX, allowed_n,
                                   err);
}

/* Keys the allow-list binds to a name go to the session with their name
 * (pt_session_allow, after the session is made): such a key registers only
 * under its name, and nobody else under that name, from the start. The
 * others (into open, *open_n of them) are allowed under any free name. */
static void split_named(char (*allowed)[PT_KEY_Z85_LEN + 1], char (*names)[PT_ALLOW_NAME_MAX],
                        int n, char (*open)[PT_KEY_Z85_LEN + 1], int *open_n)
{
    *open_n = 0;
    for (int k = 0; k < n; k++)
        if (!names[k][0])
            memcpy(open[(*open_n)++], allowed[k], sizeof allowed[k]);
}

static int allow_named(pt_session *s, char (*allowed)[PT_KEY_Z85_LEN + 1],
                       char (*names)[PT_ALLOW_NAME_MAX], int n, pt_error *err)
{
    int rc = 0;
    for (int k = 0; rc == 0 && names && k < n; k++)
        if (names[k][0])
            rc = pt_session_allow(s, allowed[k], names[k], err);
    return rc;
}

/* Removes the spawned agents' key files and their folder. */
static void remove_keys(pt_run *r)
{
    if (!r->keys_dir[0])
        return;
    for (int k = 0; k < r->nspawn; k++) {
        char name[NAME_CAP], path[PATH_CAP + 80];
        agent_name(r, k, name, sizeof name);
        snprintf(path, sizeof path, "%.4000s/%s.key", r->keys_dir, name);
        unlink(path);
        snprintf(path, sizeof path, "%.4000s/%s.pub", r->keys_dir, name);
        unlink(path);
    }
    rmdir(r->keys_dir);
    r->keys_dir[0] = '\0';
}

int pt_run_create(const pt_run_config *cfg, pt_run **out, pt_error *err)
{
    *out = NULL;
    if (!cfg || !cfg->run_dir || cfg->agents < 1)
        return pt_error_set(err, PT_EINVAL, "run: a run folder and at least one agent needed");
    pt_run *r = calloc(1, sizeof *r);
    if (!r)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    r->expect = cfg->agents;
    r->cancel = cfg->cancel;
    r->cancel_user = cfg->cancel_user;
    r->first_step = 0;
    r->target = -1;
    char record[PATH_CAP + 32];
    int rc = pt_run_dir_make(cfg->run_dir, NULL, r->dir, sizeof r->dir, err);
    snprintf(record, sizeof record, "%.4000s/%s", r->dir, PT_RUN_RECORD_FILE);
    pt_keyfile key;
    int have_key = 0, allowed_n = 0, listed = 0;
    char(*allowed)[PT_KEY_Z85_LEN + 1] = NULL;
    char(*names)[PT_ALLOW_NAME_MAX] = NULL, (*open)[PT_KEY_Z85_LEN + 1] = NULL;
    if (rc == 0)
        rc = load_trust(cfg, &key, &have_key, &allowed, &names, &listed, err);
    if (rc == 0 && names && !(open = calloc((size_t)(listed > 0 ? listed : 1), sizeof *open)))
        rc = pt_error_set(err, PT_ENOMEM, "out of memory");
    if (rc == 0 && names)
        split_named(allowed, names, listed, open, &allowed_n);
    char ctl_ep[IPC_DIR_CAP + 32], tel_ep[IPC_DIR_CAP + 32];
    const char *ctl = cfg->control_bind, *tel = cfg->telemetry_bind;
    if (rc == 0 && cfg->local_ipc && !ctl && !tel && (rc = make_ipc_dir(r, err)) == 0) {
        snprintf(ctl_ep, sizeof ctl_ep, "ipc://%s/%s", r->ipc_dir, PT_RUN_IPC_CONTROL);
        snprintf(tel_ep, sizeof tel_ep, "ipc://%s/%s", r->ipc_dir, PT_RUN_IPC_TELEMETRY);
        ctl = ctl_ep;
        tel = tel_ep;
    }
    pt_session_config sc = {ctl,
                            tel,
                            record,
                            0,
                            0,
                            have_key ? &key : NULL,
                            (const char(*)[PT_KEY_Z85_LEN + 1]) open,
                            allowed_n};
    if (rc == 0)
        rc = pt_session_create(&sc, &r->s, err);
    if (rc == 0)
        rc = allow_named(r->s, allowed, names, listed, err);
    free(allowed);
    free(names);
    free(open);
    memset(&key, 0, sizeof key); /* the secret lives on only inside the session's sockets */
    if (rc == 0)
        rc = pt_run_set_agents(r, 0, NULL, err);
    if (rc == 0) {
        pt_session_set_listener(r->s, cfg->listener, cfg->listener_user);
        pt_session_set_commit(r->s, pt_run_ckpt_commit, NULL);
    }
    if (rc < 0) {
        pt_run_destroy(&r);
        return rc;
    }
    *out = r;
    return 0;
}

void pt_run_destroy(pt_run **run_p)
{
    pt_run *r = run_p ? *run_p : NULL;
    if (!r)
        return;
    if (r->s)
        pt_run_end(r, "the run is over");
    pt_session_destroy(&r->s);
    remove_keys(r);
    remove_ipc_dir(r);
    free(r->pids);
    free(r->exited);
    free(r->names);
    free(r);
    *run_p = NULL;
}

pt_session *pt_run_session(const pt_run *r)
{
    return r ? r->s : NULL;
}

const char *pt_run_dir(const pt_run *r)
{
    return r ? r->dir : NULL;
}

pt_run_state pt_run_get_state(const pt_run *r)
{
    return r ? r->state : PT_RUN_FAILED;
}

int64_t pt_run_first_step(const pt_run *r)
{
    return r ? r->first_step : 0;
}

int64_t pt_run_target_step(const pt_run *r)
{
    return r ? r->target : -1;
}

/* ---- state */

int pt_run_failure(const pt_run *r, pt_error *err)
{
    if (r->failure[0]) {
        pt_error_set(err, PT_ESTATE, "%s", r->failure);
        return 1;
    }
    return pt_session_failure(r->s, err);
}

static int usable(const pt_session_agent *a)
{
    return a->state != PT_AGENT_DEAD && a->state != PT_AGENT_GONE && a->state != PT_AGENT_FAILED &&
           a->data_endpoint[0];
}

int pt_run_usable_agents(const pt_run *r)
{
    int n = 0;
    for (int i = 0; i < pt_session_agent_count(r->s); i++)
        n += usable(pt_session_agent_at(r->s, i));
    return n;
}

/* Every worker of the current generation idle at the target step, nothing
 * pending: the run sits at one step everywhere. */
static int finished(const pt_run *r)
{
    if (r->target < 0 || pt_session_pending(r->s) > 0 || pt_session_min_step(r->s) < r->target - 1)
        return 0;
    int workers = 0;
    for (int i = 0; i < pt_session_agent_count(r->s); i++) {
        const pt_session_agent *a = pt_session_agent_at(r->s, i);
        if (a->worker < 0 || a->gen != pt_session_generation(r->s))
            continue;
        if (a->state != PT_AGENT_IDLE)
            return 0;
        workers++;
    }
    return workers > 0;
}

static void update(pt_run *r)
{
    if (r->state == PT_RUN_ENDED || r->state == PT_RUN_FAILED)
        return;
    reap(r, 0);
    if (pt_run_failure(r, NULL))
        r->state = PT_RUN_FAILED;
    else if (r->state == PT_RUN_WAITING && pt_run_usable_agents(r) >= r->expect)
        r->state = PT_RUN_READY;
    else if (r->state == PT_RUN_TRAINING && finished(r))
        r->state = PT_RUN_FINISHED;
}

int pt_run_poll(pt_run *r, int timeout_ms, pt_error *err)
{
    int rc = pt_session_poll(r->s, timeout_ms, err);
    update(r);
    return rc;
}

/* Polls until done(r) (0), a failure (PT_ESTATE), the cancel hook or the
 * deadline (PT_ETIMEOUT, err left to the caller). */
static int wait_for(pt_run *r, int (*done)(const pt_run *), int timeout_ms, pt_error *err)
{
    int64_t end = pt_clock_ns() + (int64_t)timeout_ms * NS_PER_MS;
    for (;;) {
        update(r);
        if (pt_run_failure(r, err))
            return PT_ESTATE;
        if (done(r))
            return 0;
        if (r->cancel && r->cancel(r->cancel_user, err))
            return PT_ESTATE;
        int64_t left = (end - pt_clock_ns()) / NS_PER_MS;
        if (left <= 0)
            return PT_ETIMEOUT;
        int rc = pt_session_poll(r->s, left < POLL_MS ? (int)left : POLL_MS, err);
        if (rc < 0)
            return rc;
    }
}

static int is_ready(const pt_run *r)
{
    return r->state != PT_RUN_WAITING;
}

int pt_run_wait_agents(pt_run *r, int timeout_ms, pt_error *err)
{
    int rc = wait_for(r, is_ready, timeout_ms, err);
    if (rc == PT_ETIMEOUT)
        rc = pt_error_set(err, PT_ETIMEOUT,
                          "%d of %d agents registered within %d ms (see %.3000s/agent-*.log)",
                          pt_run_usable_agents(r), r->expect, timeout_ms, r->dir);
    return rc;
}

static int answered(const pt_run *r)
{
    return pt_session_pending(r->s) == 0;
}

/* Waits for every request; a timeout names what is still awaited. */
static int wait_answers(pt_run *r, int timeout_ms, pt_error *err)
{
    int rc = wait_for(r, answered, timeout_ms, err);
    if (rc == PT_ETIMEOUT)
        rc = pt_session_wait(r->s, 0, err);
    return rc;
}

/* ---- plans */

int pt_run_map(const pt_run *r, const pt_plan *plan, int *agents, pt_error *err)
{
    /* one agent per device: an interleaved plan's holds every chunk of its device,
     * the replicas of the first P stages */
    int n = pt_session_agent_count(r->s), wc = pt_plan_agent_count(plan);
    int P = pt_plan_rank_count(plan);
    unsigned char *used = calloc((size_t)n + 1, 1);
    if (!used)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    for (int w = 0; w < wc; w++)
        agents[w] = -1;
    /* pass 0: the agent of the worker's device; pass 1: an agent of no device */
    for (int pass = 0; pass < 2; pass++) {
        int w = 0;
        for (int s = 0; s < P; s++)
            for (int k = 0; k < plan->stages[s].replica_count; k++, w++) {
                int dev = plan->stages[s].replicas[k];
                for (int i = 0; i < n && agents[w] < 0; i++) {
                    const pt_session_agent *a = pt_session_agent_at(r->s, i);
                    if (!used[i] && usable(a) && a->device == (pass ? -1 : dev)) {
                        agents[w] = i;
                        used[i] = 1;
                    }
                }
            }
    }
    free(used);
    int w = 0;
    for (int s = 0; s < P; s++)
        for (int k = 0; k < plan->stages[s].replica_count; k++, w++)
            if (agents[w] < 0)
                return pt_error_set(err, PT_ENOTFOUND,
                                    "stage %d replica %d needs device %d, and no live agent is "
                                    "free for it (%d agents)",
                                    s, k, plan->stages[s].replicas[k], n);
    return 0;
}

/* Keeps what a generation's job says (the controller's copies outlive the
 * caller's strings) and the session plan that hands it to the agents. */
static pt_session_plan take_job(pt_run *r, const pt_plan *plan, const pt_run_job *job,
                                const int *agents, int64_t first_step)
{
    r->model = job->model;
    snprintf(r->data, sizeof r->data, "%s", job->data ? job->data : "");
    snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s", job->checkpoint_dir ? job->checkpoint_dir : "");
    r->seed = job->seed;
    r->ckpt_every = job->checkpoint_every;
    pt_session_plan sp = {plan,          job->model, agents,
                          r->data,       r->seed,    job->checkpoint_dir ? r->ckpt_dir : NULL,
                          r->ckpt_every, first_step};
    return sp;
}

int pt_run_assign(pt_run *r, const pt_plan *plan, const pt_run_job *job, int64_t resume_step,
                  int timeout_ms, pt_error *err)
{
    if (r->state == PT_RUN_ENDED || r->state == PT_RUN_FAILED)
        return pt_error_set(err, PT_ESTATE, "run: cannot assign: the run has %s",
                            r->state == PT_RUN_ENDED ? "ended" : "failed");
    int wc = pt_plan_agent_count(plan);
    int *agents = calloc((size_t)(wc > 0 ? wc : 1), sizeof *agents);
    if (!agents)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int rc = pt_run_map(r, plan, agents, err);
    if (rc == 0) {
        pt_session_plan sp = take_job(r, plan, job, agents, resume_step);
        rc = pt_session_assign(r->s, &sp, err);
    }
    free(agents);
    if (rc == 0 && (rc = wait_answers(r, timeout_ms, err)) == 0) {
        r->state = PT_RUN_ASSIGNED;
        r->first_step = resume_step;
        r->target = -1;
    }
    return rc;
}

int pt_run_adopt(pt_run *r, const pt_plan *plan, const pt_run_job *job, int64_t gen,
                 const char *const *names, int64_t first_step, int64_t target, pt_error *err)
{
    if (r->state != PT_RUN_READY)
        return pt_error_set(err, PT_ESTATE, "run: cannot pick a run up: the controller is %s",
                            pt_run_state_name(r->state));
    int wc = pt_plan_agent_count(plan);
    int *agents = calloc((size_t)(wc > 0 ? wc : 1), sizeof *agents);
    if (!agents)
        return pt_error_set(err, PT_ENOMEM, "out of memory");
    int rc = 0;
    for (int w = 0; w < wc && rc == 0; w++) {
        agents[w] = pt_session_find_agent(r->s, names[w]);
        if (agents[w] < 0 || !usable(pt_session_agent_at(r->s, agents[w])))
            rc = pt_error_set(err, PT_ENOTFOUND,
                              "worker %d: agent %s (of the run to pick up) has not registered", w,
                              names[w]);
    }
    if (rc == 0) {
        pt_session_plan sp = take_job(r, plan, job, agents, first_step);
        rc = pt_session_adopt(r->s, &sp, gen, err);
    }
    free(agents);
    if (rc == 0) {
        r->state = PT_RUN_TRAINING;
        r->first_step = first_step;
        r->target = target;
    }
    return rc;
}

int pt_run_read_last_plan(const char *dir, int64_t *gen, char (*names)[PT_MSG_ID_MAX], int cap,
                          int *n, pt_error *err)
{
    *gen = 0;
    *n = 0;
    char path[PATH_CAP + 32];
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%.4000s/%s", dir, PT_RUN_RECORD_FILE);
    else
        snprintf(path, sizeof path, "%.4000s", dir);
    char *text = NULL;
    int rc = pt_file_read(path, &text, NULL, err);
    if (rc < 0)
        return rc;
    const char *last = NULL;
    for (const char *p = text; (p = strstr(p, "\"kind\":\"plan\"")); p++)
        last = p;
    if (!last) {
        free(text);
        return pt_error_set(err, PT_ENOTFOUND, "%s: no plan in this run record", path);
    }
    const char *start = last;
    while (start > text && start[-1] != '\n')
        start--;
    const char *end = strchr(last, '\n');
    cJSON *j = cJSON_ParseWithLength(start, end ? (size_t)(end - start) : strlen(start));
    const cJSON *g = j ? cJSON_GetObjectItem(j, "gen") : NULL;
    const cJSON *ws = j ? cJSON_GetObjectItem(j, "workers") : NULL;
    if (!cJSON_IsNumber(g) || g->valuedouble < 1 || g->valuedouble > PT_MSG_INT_MAX ||
        !cJSON_IsArray(ws)) {
        rc = pt_error_set(err, PT_EPARSE, "%s: the last plan line has no gen or workers", path);
    } else {
        *gen = (int64_t)g->valuedouble;
        const cJSON *w;
        cJSON_ArrayForEach(w, ws)
        {
            const cJSON *a = cJSON_GetObjectItem(w, "agent");
            const cJSON *k = cJSON_GetObjectItem(w, "worker");
            if (!cJSON_IsString(a) || !cJSON_IsNumber(k) || k->valuedouble != *n ||
                strlen(a->valuestring) >= PT_MSG_ID_MAX) {
                rc = pt_error_set(err, PT_EPARSE, "%s: plan workers[%d]: no agent name", path, *n);
                break;
            }
            if (*n >= cap) {
                rc = pt_error_set(err, PT_ERANGE, "%s: more than %d workers", path, cap);
                break;
            }
            snprintf(names[(*n)++], PT_MSG_ID_MAX, "%s", a->valuestring);
        }
    }
    cJSON_Delete(j);
    free(text);
    if (rc < 0)
        *n = 0;
    return rc;
}

int pt_run_start(pt_run *r, int64_t steps, pt_error *err)
{
    if (r->state != PT_RUN_ASSIGNED && r->state != PT_RUN_STOPPED && r->state != PT_RUN_FINISHED)
        return pt_error_set(err, PT_ESTATE, "run: cannot start: the run is %s",
                            pt_run_state_name(r->state));
    if (r->state == PT_RUN_FINISHED)
        r->first_step = r->target; /* going on from where the last start ended */
    int rc = pt_session_start(r->s, steps, err);
    if (rc == 0) {
        r->target = steps > 0 ? r->first_step + steps : -1;
        r->state = PT_RUN_TRAINING;
    }
    return rc;
}

int pt_run_stop(pt_run *r, const char *reason, int timeout_ms, pt_error *err)
{
    int rc = pt_session_stop(r->s, reason, err);
    if (rc == 0 && (rc = wait_answers(r, timeout_ms, err)) == 0) {
        r->state = PT_RUN_STOPPED;
        int64_t at = pt_session_stop_step(r->s);
        if (at >= 0)
            r->first_step = at;
    }
    return rc;
}

int pt_run_restart(pt_run *r, const pt_plan *plan, int timeout_ms, int64_t *resume_step,
                   pt_error *err)
{
    if (!r->ckpt_dir[0] || !r->model)
        return pt_error_set(err, PT_ESTATE, "run: a restart needs a checkpoint folder");
    int rc = pt_run_stop(r, "apply & restart", timeout_ms, err);
    int64_t step = pt_session_committed_step(r->s);
    if (rc == 0 && step < 0)
        rc = pt_error_set(err, PT_ESTATE, "the stop committed no checkpoint");
    pt_run_job job = {r->model, r->data, r->seed, r->ckpt_dir, r->ckpt_every};
    char data[PT_MSG_PATH_MAX], ck[PATH_CAP];
    snprintf(data, sizeof data, "%s", r->data);
    snprintf(ck, sizeof ck, "%s", r->ckpt_dir);
    job.data = data;
    job.checkpoint_dir = ck;
    if (rc == 0)
        rc = pt_run_assign(r, plan, &job, step, timeout_ms, err);
    if (rc == 0 && resume_step)
        *resume_step = step;
    return rc;
}
