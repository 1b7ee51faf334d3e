/* CURVE key files (docs/formats.md, "Key files"), written by `pipetop keys`:
 * NAME.key holds a key pair (mode 0600), NAME.pub the public key alone.
 *
 *     # pipetop CURVE key pair: keep this file secret (mode 0600)
 *     pipetop-key 1
 *     public rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7
 *     secret JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6
 *
 * Keys are Z85 text (40 characters for 32 bytes, ZeroMQ's zmq_z85_encode).
 * This module only parses and writes the text; making keys and using them on
 * sockets is runtime/trust.h (protocol/ does not link ZeroMQ). */
#ifndef PT_PROTOCOL_KEYFILE_H
#define PT_PROTOCOL_KEYFILE_H

#include <stddef.h>

#include "protocol/error.h"

#define PT_KEY_Z85_LEN     40   /* characters of one Z85 key */
#define PT_KEYFILE_MAX     4096 /* bytes of a key file: a few lines */
#define PT_KEYFILE_VERSION 1

typedef struct pt_keyfile {
    char public_z85[PT_KEY_Z85_LEN + 1];
    char secret_z85[PT_KEY_Z85_LEN + 1]; /* "" in a public key file */
    int has_secret;
} pt_keyfile;

/* 1 when s is 40 characters of Z85 that decode to 32 bytes, else 0. */
int pt_key_z85_valid(const char *s);

/* Parses key-file text (len bytes; NUL not required). On failure *out is
 * zeroed and err is "source: line N: reason". */
int pt_keyfile_parse(const char *text, size_t len, const char *source, pt_keyfile *out,
                     pt_error *err);

/* Loads path (a regular file of at most PT_KEYFILE_MAX bytes). A file holding
 * a secret key must not be readable or writable by group or others: it is
 * refused (PT_EINVAL, "chmod 600 FILE") as ssh refuses such keys. */
int pt_keyfile_load(const char *path, pt_keyfile *out, pt_error *err);

/* The file text for k: with its secret when with_secret (and k has one),
 * else the public key alone. Writes at most cap bytes including the NUL;
 * returns the length, or PT_ERANGE when cap is too small. */
int pt_keyfile_format(const pt_keyfile *k, int with_secret, char *buf, size_t cap);

/* Writes base.key (the pair, mode 0600) and base.pub (the public key, mode
 * 0644), each atomically. Refuses (PT_EEXIST-like PT_EINVAL) to replace an
 * existing base.key unless overwrite. */
int pt_keyfile_write_pair(const char *base, const pt_keyfile *k, int overwrite, pt_error *err);

/* An allow-list file (docs/formats.md, "Key files"): one public key per
 * line, either 40 characters of Z85 or the path of a key file (NAME.pub or
 * NAME.key; a relative path is taken from the allow-list's folder), each
 * optionally followed by blanks and a comment; blank lines and lines
 * starting with '#' are skipped. At most cap keys go to keys[]; *n gets the
 * count. 0, or PT_EPARSE/PT_ERANGE/PT_EIO with "FILE: line N: reason". */
int pt_allowlist_load(const char *path, char (*keys)[PT_KEY_Z85_LEN + 1], int cap, int *n,
                      pt_error *err);

/* Agent names in allow-lists: an entry "KEY agent=NAME" binds the key to
 * the name (PT_MSG_ID_MAX bytes, protocol/message.h). */
#define PT_ALLOW_NAME_MAX 64
#define PT_ALLOW_NAME_TAG "agent="

/* As pt_allowlist_load, and names[k] (may be NULL) gets the name entry k is
 * bound to by a second word agent=NAME ("" none): the console then lets
 * that key register only under that name, and that name only from that
 * key. A bad name: PT_EPARSE "FILE: line N: agent=\"X\" is not an agent
 * name (...)". */
int pt_allowlist_load_named(const char *path, char (*keys)[PT_KEY_Z85_LEN + 1],
                            char (*names)[PT_ALLOW_NAME_MAX], int cap, int *n, pt_error *err);

/* A public key given on a command line: 40 characters of Z85, or the path
 * of a key file whose public key is taken. 0 or the key file's error. */
int pt_key_arg_public(const char *arg, char out[PT_KEY_Z85_LEN + 1], pt_error *err);

#endif
