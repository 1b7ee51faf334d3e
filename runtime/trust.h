/* CURVE authentication for every ZeroMQ socket of a run (issue 13; the
 * design is in docs/architecture.md, "Trust"). Both the console's run
 * controller (tui/) and the agent use it, so it lives in runtime/, next to
 * the communicator, the lowest layer that links ZeroMQ.
 *
 * Set-up order on a context:
 *   pt_zap_start(ctx, ...)                     once, before any CURVE server binds
 *   pt_trust_server(sock, &console_key)        on each socket that binds
 *   pt_trust_client(sock, &agent_key, srv_pub) on each socket that connects
 *   pt_trust_check_bind(endpoint, curve_on)    before each zmq_bind
 * A client whose public key is not on the ZAP handler's allow-list never
 * completes the handshake, so nothing it sends is delivered; a client without
 * CURVE fails the handshake on the mechanism. */
#ifndef PT_RUNTIME_TRUST_H
#define PT_RUNTIME_TRUST_H

#include <stdint.h>

#include "protocol/error.h"
#include "protocol/keyfile.h"

/* The ZAP domain every pipetop CURVE server sets (ZMQ_ZAP_DOMAIN). */
#define PT_ZAP_DOMAIN "pipetop"
/* Public keys a ZAP handler holds: console, agents, a launcher's spares. */
#define PT_ZAP_ALLOW_MAX 4096

/* A new random key pair (zmq_curve_keypair). 0 or PT_EUNSUPP (libzmq built
 * without CURVE) / PT_EIO. */
int pt_trust_keypair(pt_keyfile *out, pt_error *err);

/* The public key of a secret key (zmq_curve_public), into out (41 bytes). */
int pt_trust_public_of(const char *secret_z85, char *out, pt_error *err);

/* Makes sock a CURVE server with key's secret, in the pipetop ZAP domain,
 * with the domain enforced (no ZAP handler: every client refused). Before
 * zmq_bind. 0 or PT_EINVAL (no secret) / PT_EIO (zmq_setsockopt failed). */
int pt_trust_server(void *sock, const pt_keyfile *key, pt_error *err);

/* Makes sock a CURVE client with its own pair and the server's public key.
 * Before zmq_connect. 0 or PT_EINVAL / PT_EIO. */
int pt_trust_client(void *sock, const pt_keyfile *key, const char *server_public_z85,
                    pt_error *err);

/* 0 when endpoint may be bound: any endpoint with CURVE on; without it only
 * ipc://, inproc:// and tcp:// on a loopback address (127.0.0.0/8, ::1,
 * localhost). Otherwise PT_EINVAL with a message that names the endpoint and
 * says how to make keys (`pipetop keys --out DIR/NAME`). */
int pt_trust_check_bind(const char *endpoint, int curve_on, pt_error *err);

/* ---- the ZAP handler: a thread answering libzmq's authentication requests
 * on inproc://zeromq.zap.01 of one context from an allow-list. */
typedef struct pt_zap pt_zap;

/* Starts the handler on ctx with n allowed public keys (Z85; copied). One
 * per context (libzmq allows one binder of the ZAP endpoint). 0, or
 * PT_EINVAL (a key that is not Z85, n out of range), PT_EIO (the endpoint is
 * taken or the thread could not start), PT_ENOMEM. *out is NULL on error. */
int pt_zap_start(void *ctx, const char *const *allowed, int n, pt_zap **out, pt_error *err);

/* Adds a public key to the allow-list while running (thread-safe): the
 * console learns an agent's key from a launcher. 0, PT_EINVAL, PT_ERANGE. */
int pt_zap_allow(pt_zap *zap, const char *public_z85, pt_error *err);

/* Requests answered so far: allowed and refused (wrong mechanism, domain or
 * key). A request is counted before its answer is sent, so whoever saw the
 * handshake's outcome (a message through, a failure event) finds it
 * counted. Thread-safe. */
int64_t pt_zap_allowed_count(pt_zap *zap);
/* A client whose handshake was refused: its public key (Z85, "" when it did
 * not speak CURVE), its address as the kernel gave it, the reason, and how
 * many handshakes it tried. */
#define PT_ZAP_REFUSALS_MAX 64
#define PT_ZAP_ADDRESS_MAX  64
typedef struct pt_zap_refusal {
    char key[PT_KEY_Z85_LEN + 1];
    char address[PT_ZAP_ADDRESS_MAX];
    char why[48];
    int64_t count;
} pt_zap_refusal;
/* The refused clients not handed out yet, each distinct (key, address)
 * once, up to cap into out; the number. *untold (not NULL): refusals of
 * clients beyond the first PT_ZAP_REFUSALS_MAX, only counted. Any thread. */
int pt_zap_take_refusals(pt_zap *z, pt_zap_refusal *out, int cap, int64_t *untold);
int64_t pt_zap_refused_count(pt_zap *zap);

/* Waits until at least n requests were refused or timeout_ms passed; 0 or
 * PT_ETIMEOUT. For tests and for the console's agents view. */
int pt_zap_wait_refused(pt_zap *zap, int64_t n, int timeout_ms);

/* Stops the thread and closes its socket (before zmq_ctx_term). NULL-safe. */
void pt_zap_stop(pt_zap **zap_p);

#endif
