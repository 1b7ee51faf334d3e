/* CURVE set-up and the ZAP handler (see trust.h). */
#include "protocol/clock.h"
#include "runtime/trust.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define ZAP_ENDPOINT      "inproc://zeromq.zap.01"
#define ZAP_VERSION       "1.0"
#define ZAP_FRAMES_MAX    8 /* version, id, domain, address, identity, mechanism, 1 credential */
#define ZAP_FRAME_BYTES   256
#define CURVE_KEY_BYTES   32
#define KEYS_COMMAND_HINT "make a key pair with `pipetop keys --out DIR/NAME` and use CURVE"

int pt_trust_keypair(pt_keyfile *out, pt_error *err)
{
    memset(out, 0, sizeof *out);
    if (!zmq_has("curve"))
        return pt_error_set(err, PT_EUNSUPP, "keys: this libzmq was built without CURVE");
    if (zmq_curve_keypair(out->public_z85, out->secret_z85) != 0)
        return pt_error_set(err, PT_EIO, "keys: zmq_curve_keypair: %s", zmq_strerror(errno));
    out->has_secret = 1;
    return 0;
}

int pt_trust_public_of(const char *secret_z85, char *out, pt_error *err)
{
    if (!pt_key_z85_valid(secret_z85))
        return pt_error_set(err, PT_EINVAL, "keys: not a Z85 secret key");
    if (zmq_curve_public(out, secret_z85) != 0)
        return pt_error_set(err, PT_EIO, "keys: zmq_curve_public: %s", zmq_strerror(errno));
    return 0;
}

static int set_opt(void *sock, int opt, const void *v, size_t n, const char *name, pt_error *err)
{
    if (zmq_setsockopt(sock, opt, v, n) != 0)
        return pt_error_set(err, PT_EIO, "curve: zmq_setsockopt %s: %s", name, zmq_strerror(errno));
    return 0;
}

int pt_trust_server(void *sock, const pt_keyfile *key, pt_error *err)
{
    if (!sock || !key || !key->has_secret || !pt_key_z85_valid(key->secret_z85))
        return pt_error_set(err, PT_EINVAL, "curve: a server needs a key pair with its secret");
    int one = 1, rc;
    if ((rc = set_opt(sock, ZMQ_CURVE_SERVER, &one, sizeof one, "CURVE_SERVER", err)) < 0 ||
        (rc = set_opt(sock, ZMQ_CURVE_SECRETKEY, key->secret_z85, PT_KEY_Z85_LEN, "CURVE_SECRETKEY",
                      err)) < 0 ||
        (rc = set_opt(sock, ZMQ_ZAP_DOMAIN, PT_ZAP_DOMAIN, strlen(PT_ZAP_DOMAIN), "ZAP_DOMAIN",
                      err)) < 0)
        return rc;
#ifdef ZMQ_ZAP_ENFORCE_DOMAIN
    /* without a ZAP handler libzmq would let every CURVE client in; with the
     * domain enforced it refuses them (a draft option: absent in some builds,
     * where pt_zap_start must simply come first, as trust.h says) */
    zmq_setsockopt(sock, ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one);
#endif
    return 0;
}

int pt_trust_client(void *sock, const pt_keyfile *key, const char *server_public_z85, pt_error *err)
{
    if (!sock || !key || !key->has_secret || !pt_key_z85_valid(key->secret_z85) ||
        !pt_key_z85_valid(key->public_z85))
        return pt_error_set(err, PT_EINVAL, "curve: a client needs its own key pair");
    if (!pt_key_z85_valid(server_public_z85))
        return pt_error_set(err, PT_EINVAL, "curve: the server's public key is not a Z85 key");
    int rc;
    if ((rc = set_opt(sock, ZMQ_CURVE_SERVERKEY, server_public_z85, PT_KEY_Z85_LEN,
                      "CURVE_SERVERKEY", err)) < 0 ||
        (rc = set_opt(sock, ZMQ_CURVE_PUBLICKEY, key->public_z85, PT_KEY_Z85_LEN, "CURVE_PUBLICKEY",
                      err)) < 0 ||
        (rc = set_opt(sock, ZMQ_CURVE_SECRETKEY, key->secret_z85, PT_KEY_Z85_LEN, "CURVE_SECRETKEY",
                      err)) < 0)
        return rc;
    return 0;
}

/* The host part of "tcp://HOST:PORT" (brackets of [v6] removed) is loopback. */
static int loopback_host(const char *hostport)
{
    char host[256];
    const char *end;
    if (hostport[0] == '[') {
        end = strchr(hostport, ']');
        if (!end)
            return 0;
        hostport++;
    } else {
        end = strrchr(hostport, ':');
        if (!end)
            end = hostport + strlen(hostport);
    }
    size_t n = (size_t)(end - hostport);
    if (n == 0 || n >= sizeof host)
        return 0;
    memcpy(host, hostport, n);
    host[n] = '\0';
    if (!strcmp(host, "localhost") || !strcmp(host, "::1") || !strcmp(host, "lo"))
        return 1;
    /* 127.a.b.c, every part a number */
    unsigned a, b, c, d;
    char extra;
    return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) == 4 && a == 127 && b < 256 &&
           c < 256 && d < 256;
}

int pt_trust_check_bind(const char *endpoint, int curve_on, pt_error *err)
{
    if (!endpoint)
        return pt_error_set(err, PT_EINVAL, "bind: no endpoint");
    if (curve_on)
        return 0;
    if (!strncmp(endpoint, "ipc://", 6) || !strncmp(endpoint, "inproc://", 9))
        return 0;
    if (!strncmp(endpoint, "tcp://", 6) && loopback_host(endpoint + 6))
        return 0;
    return pt_error_set(err, PT_EINVAL,
                        "bind %s: refused without authentication: only loopback (127.0.0.1, "
                        "::1) and ipc:// may be bound without CURVE; %s",
                        endpoint, KEYS_COMMAND_HINT);
}

/* ---- ZAP handler ------------------------------------------------------------ */

struct pt_zap {
    void *rep;     /* bound to ZAP_ENDPOINT; used by the thread only after start */
    void *stop_tx; /* stop_tx -> stop_rx wakes the thread to end */
    void *stop_rx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    char (*keys)[PT_KEY_Z85_LEN + 1];
    int n_keys;
    int64_t allowed, refused;
    /* the distinct refused clients (key, or "" for no CURVE, and address),
     * each handed to pt_zap_take_refusals once; past the table's end only
     * counted */
    pt_zap_refusal seen[PT_ZAP_REFUSALS_MAX];
    int n_seen, n_told;
    int64_t untold; /* refusals of clients not in the table */
};

static int key_allowed(pt_zap *z, const char *z85)
{
    int yes = 0;
    pthread_mutex_lock(&z->lock);
    for (int i = 0; i < z->n_keys && !yes; i++)
        yes = !strcmp(z->keys[i], z85);
    pthread_mutex_unlock(&z->lock);
    return yes;
}

/* Remembers a refused client once (by key and address; the key is public). */
static void note_refusal(pt_zap *z, const char *key, const char *address, const char *why)
{
    for (int i = 0; i < z->n_seen; i++)
        if (!strcmp(z->seen[i].key, key) && !strcmp(z->seen[i].address, address)) {
            z->seen[i].count++;
            return;
        }
    if (z->n_seen == PT_ZAP_REFUSALS_MAX) {
        z->untold++;
        return;
    }
    pt_zap_refusal *r = &z->seen[z->n_seen++];
    snprintf(r->key, sizeof r->key, "%s", key);
    snprintf(r->address, sizeof r->address, "%s", address);
    snprintf(r->why, sizeof r->why, "%s", why);
    r->count = 1;
}

static void count(pt_zap *z, int ok, const char *key, const char *address, const char *why)
{
    pthread_mutex_lock(&z->lock);
    if (ok)
        z->allowed++;
    else
        z->refused++;
    if (!ok)
        note_refusal(z, key, address, why);
    pthread_cond_broadcast(&z->changed);
    pthread_mutex_unlock(&z->lock);
}

/* Reads one request (all its frames) and answers it. */
static void answer(pt_zap *z)
{
    char frames[ZAP_FRAMES_MAX][ZAP_FRAME_BYTES];
    size_t len[ZAP_FRAMES_MAX];
    int n = 0, more = 1, truncated = 0;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, z->rep, 0) < 0) {
            zmq_msg_close(&m);
            return;
        }
        more = zmq_msg_more(&m);
        size_t sz = zmq_msg_size(&m);
        if (n < ZAP_FRAMES_MAX && sz <= ZAP_FRAME_BYTES) {
            memcpy(frames[n], zmq_msg_data(&m), sz);
            len[n] = sz;
        } else {
            truncated = 1;
        }
        n++;
        zmq_msg_close(&m);
    }
    /* 0 version, 1 request id, 2 domain, 3 address, 4 identity, 5 mechanism, 6 key */
    int ok = 0;
    const char *why = "malformed ZAP request";
    if (!truncated && n >= 6 && len[0] == 3 && !memcmp(frames[0], ZAP_VERSION, 3)) {
        if (len[2] != strlen(PT_ZAP_DOMAIN) || memcmp(frames[2], PT_ZAP_DOMAIN, len[2]))
            why = "not the pipetop domain";
        else if (len[5] != 5 || memcmp(frames[5], "CURVE", 5) || n != 7 ||
                 len[6] != CURVE_KEY_BYTES)
            why = "CURVE required";
        else {
            char z85[PT_KEY_Z85_LEN + 1];
            zmq_z85_encode(z85, (const uint8_t *)frames[6], CURVE_KEY_BYTES);
            ok = key_allowed(z, z85);
            why = ok ? "OK" : "public key not on the allow-list";
        }
    }
    const char *code = ok ? "200" : "400";
    /* The user id of an allowed client is its public key (Z85): the server
     * reads it from every message (zmq_msg_gets "User-Id") and so knows who
     * sent it, whatever name the message claims. */
    char user[PT_KEY_Z85_LEN + 1] = "";
    if (ok)
        zmq_z85_encode(user, (const uint8_t *)frames[6], CURVE_KEY_BYTES);
    size_t id_len = n > 1 && !truncated ? len[1] : 0;
    /* Counted before the answer goes out: a peer can see the answer's effect
     * (its handshake done, a message through) before this thread runs again,
     * and whoever saw it then must find the handshake counted. */
    /* the address (frame 3) as text, only printable bytes: it is shown */
    char address[PT_ZAP_ADDRESS_MAX] = "", key[PT_KEY_Z85_LEN + 1] = "";
    for (size_t i = 0; n > 3 && !truncated && i < len[3] && i + 1 < sizeof address; i++)
        address[i] = frames[3][i] >= ' ' && frames[3][i] <= '~' ? frames[3][i] : '?';
    if (!ok && !truncated && n == 7 && len[6] == CURVE_KEY_BYTES)
        zmq_z85_encode(key, (const uint8_t *)frames[6], CURVE_KEY_BYTES);
    count(z, ok, key, address, why);
    zmq_send(z->rep, ZAP_VERSION, 3, ZMQ_SNDMORE);
    zmq_send(z->rep, n > 1 ? frames[1] : "", id_len, ZMQ_SNDMORE);
    zmq_send(z->rep, code, 3, ZMQ_SNDMORE);
    zmq_send(z->rep, why, strlen(why), ZMQ_SNDMORE);
    zmq_send(z->rep, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(z->rep, "", 0, 0); /* metadata */
}

static void *zap_main(void *arg)
{
    pt_zap *z = arg;
    for (;;) {
        zmq_pollitem_t items[2] = {{z->rep, 0, ZMQ_POLLIN, 0}, {z->stop_rx, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break; /* ETERM: the context is ending */
        }
        if (items[1].revents & ZMQ_POLLIN)
            break;
        if (items[0].revents & ZMQ_POLLIN)
            answer(z);
    }
    return NULL;
}

static void zap_free(pt_zap *z)
{
    if (z->rep)
        zmq_close(z->rep);
    if (z->stop_tx)
        zmq_close(z->stop_tx);
    if (z->stop_rx)
        zmq_close(z->stop_rx);
    pthread_cond_destroy(&z->changed);
    pthread_mutex_destroy(&z->lock);
    free(z->keys);
    free(z);
}

int pt_zap_start(void *ctx, const char *const *allowed, int n, pt_zap **out, pt_error *err)
{
    *out = NULL;
    if (!ctx || n < 0 || n > PT_ZAP_ALLOW_MAX || (n > 0 && !allowed))
        return pt_error_set(err, PT_EINVAL, "zap: a context and 0..%d keys are required",
                            PT_ZAP_ALLOW_MAX);
    for (int i = 0; i < n; i++)
        if (!pt_key_z85_valid(allowed[i]))
            return pt_error_set(err, PT_EINVAL, "zap: allowed key %d is not a Z85 public key", i);
    pt_zap *z = calloc(1, sizeof *z);
    if (!z || !(z->keys = calloc(PT_ZAP_ALLOW_MAX, sizeof *z->keys))) {
        free(z);
        return pt_error_set(err, PT_ENOMEM, "zap: out of memory");
    }
    pthread_mutex_init(&z->lock, NULL);
    pthread_cond_init(&z->changed, NULL);
    for (int i = 0; i < n; i++)
        memcpy(z->keys[i], allowed[i], PT_KEY_Z85_LEN + 1);
    z->n_keys = n;
    char stop_ep[64];
    snprintf(stop_ep, sizeof stop_ep, "inproc://pt-zap-stop-%p", (void *)z);
    z->rep = zmq_socket(ctx, ZMQ_REP);
    z->stop_rx = zmq_socket(ctx, ZMQ_PAIR);
    z->stop_tx = zmq_socket(ctx, ZMQ_PAIR);
    int linger = 0;
    if (!z->rep || !z->stop_rx || !z->stop_tx ||
        zmq_setsockopt(z->rep, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_bind(z->rep, ZAP_ENDPOINT) != 0 || zmq_bind(z->stop_rx, stop_ep) != 0 ||
        zmq_connect(z->stop_tx, stop_ep) != 0) {
        int e = errno;
        zap_free(z);
        return pt_error_set(err, PT_EIO, "zap: %s: %s (one ZAP handler per context)", ZAP_ENDPOINT,
                            zmq_strerror(e));
    }
    if (pthread_create(&z->thread, NULL, zap_main, z) != 0) {
        zap_free(z);
        return pt_error_set(err, PT_EIO, "zap: cannot start the handler thread");
    }
    *out = z;
    return 0;
}

int pt_zap_allow(pt_zap *z, const char *public_z85, pt_error *err)
{
    if (!z || !pt_key_z85_valid(public_z85))
        return pt_error_set(err, PT_EINVAL, "zap: not a Z85 public key");
    int rc = 0;
    pthread_mutex_lock(&z->lock);
    int known = 0; /* a key allowed again (bound to one more name) takes no second entry */
    for (int k = 0; k < z->n_keys && !known; k++)
        known = !memcmp(z->keys[k], public_z85, PT_KEY_Z85_LEN);
    if (known)
        rc = 0;
    else if (z->n_keys >= PT_ZAP_ALLOW_MAX)
        rc = pt_error_set(err, PT_ERANGE, "zap: more than %d allowed keys", PT_ZAP_ALLOW_MAX);
    else
        memcpy(z->keys[z->n_keys++], public_z85, PT_KEY_Z85_LEN + 1);
    pthread_mutex_unlock(&z->lock);
    return rc;
}

int64_t pt_zap_allowed_count(pt_zap *z)
{
    pthread_mutex_lock(&z->lock);
    int64_t v = z->allowed;
    pthread_mutex_unlock(&z->lock);
    return v;
}

int pt_zap_take_refusals(pt_zap *z, pt_zap_refusal *out, int cap, int64_t *untold)
{
    pthread_mutex_lock(&z->lock);
    int n = 0;
    while (n < cap && z->n_told < z->n_seen)
        out[n++] = z->seen[z->n_told++];
    if (untold)
        *untold = z->untold;
    pthread_mutex_unlock(&z->lock);
    return n;
}

int64_t pt_zap_refused_count(pt_zap *z)
{
    pthread_mutex_lock(&z->lock);
    int64_t v = z->refused;
    pthread_mutex_unlock(&z->lock);
    return v;
}

int pt_zap_wait_refused(pt_zap *z, int64_t n, int timeout_ms)
{
    struct timespec until = pt_clock_deadline(CLOCK_REALTIME, timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&z->lock);
    while (z->refused < n && rc == 0)
        if (pthread_cond_timedwait(&z->changed, &z->lock, &until) == ETIMEDOUT)
            rc = PT_ETIMEOUT;
    if (z->refused >= n)
        rc = 0;
    pthread_mutex_unlock(&z->lock);
    return rc;
}

void pt_zap_stop(pt_zap **zap_p)
{
    if (!zap_p || !*zap_p)
        return;
    pt_zap *z = *zap_p;
    zmq_send(z->stop_tx, "", 0, 0);
    pthread_join(z->thread, NULL);
    zap_free(z);
    *zap_p = NULL;
}
