/* CURVE key files (see keyfile.h and docs/formats.md). */
#include "protocol/keyfile.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/fileio.h"

#define KEYFILE_MAGIC "pipetop-key"
#define PT_ALLOWLIST_PATH_MAX                                                                      \
    4096 /* bytes of an allow-list path or an entry of it */ /* characters of a bad line quoted in \
                                                                an error */

static const char z85_chars[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                ".-:+=^!/*?&<>()[]{}@%$#";

int pt_key_z85_valid(const char *s)
{
    if (!s || strlen(s) != PT_KEY_Z85_LEN)
        return 0;
    for (int g = 0; g < PT_KEY_Z85_LEN; g += 5) {
        uint64_t v = 0;
        for (int i = 0; i < 5; i++) {
            const char *at = s[g + i] ? strchr(z85_chars, s[g + i]) : NULL;
            if (!at)
                return 0;
            v = v * 85 + (uint64_t)(at - z85_chars);
        }
        if (v > UINT32_MAX) /* five characters carry four bytes */
            return 0;
    }
    return 1;
}

/* A line that is not what was expected. Its text is never shown: a key
 * file's lines hold secrets, and a file given in its place (a password
 * file, say) holds someone else's; the line number and the field say
 * enough to find it. */
static int fail_line(pt_error *err, const char *source, int lineno, const char *what)
{
    return pt_error_set(err, PT_EPARSE, "%s: line %d: %s (the line's text is not shown)", source,
                        lineno, what);
}

int pt_keyfile_parse(const char *text, size_t len, const char *source, pt_keyfile *out,
                     pt_error *err)
{
    const char *src = source ? source : "key file";
    memset(out, 0, sizeof *out);
    if (!text)
        return pt_error_set(err, PT_EINVAL, "%s: no text", src);
    if (len > PT_KEYFILE_MAX)
        return pt_error_set(err, PT_ERANGE, "%s: %zu bytes is above the limit of %d bytes", src,
                            len, PT_KEYFILE_MAX);
    int lineno = 0, seen_magic = 0, seen_public = 0, seen_secret = 0;
    pt_keyfile k = {0};
    size_t pos = 0;
    while (pos < len) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl ? 1 : 0);
        lineno++;
        while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
            n--;
        size_t k0 = 0;
        while (k0 < n && (line[k0] == ' ' || line[k0] == '\t'))
            k0++;
        line += k0;
        n -= k0;
        if (n == 0 || line[0] == '#')
            continue;
        if (memchr(line, '\0', n))
            return fail_line(err, src, lineno, "a NUL byte");
        char word[16], value[64];
        size_t w = 0;
        while (w < n && line[w] != ' ' && line[w] != '\t')
            w++;
        size_t v0 = w;
        while (v0 < n && (line[v0] == ' ' || line[v0] == '\t'))
            v0++;
        if (w >= sizeof word || n - v0 >= sizeof value || v0 == n)
            return fail_line(err, src, lineno, "not \"WORD VALUE\"");
        memcpy(word, line, w);
        word[w] = '\0';
        memcpy(value, line + v0, n - v0);
        value[n - v0] = '\0';
        if (!seen_magic) {
            if (strcmp(word, KEYFILE_MAGIC))
                return fail_line(err, src, lineno,
                                 "the first line must be \"" KEYFILE_MAGIC " 1\"");
            if (strcmp(value, "1"))
                return pt_error_set(err, PT_EUNSUPP,
                                    "%s: line %d: a version other than %d (this pipetop reads "
                                    "version %d)",
                                    src, lineno, PT_KEYFILE_VERSION, PT_KEYFILE_VERSION);
            seen_magic = 1;
            continue;
        }
        int is_public = !strcmp(word, "public"), is_secret = !strcmp(word, "secret");
        if (!is_public && !is_secret)
            return fail_line(err, src, lineno, "unknown field (public, secret)");
        if ((is_public && seen_public) || (is_secret && seen_secret))
            return pt_error_set(err, PT_EPARSE, "%s: line %d: %s: given twice", src, lineno, word);
        if (!pt_key_z85_valid(value))
            return pt_error_set(err, PT_EPARSE,
                                "%s: line %d: %s: not a Z85 key (%d characters of the Z85 "
                                "alphabet, as `pipetop keys` writes)",
                                src, lineno, word, PT_KEY_Z85_LEN);
        memcpy(is_public ? k.public_z85 : k.secret_z85, value, PT_KEY_Z85_LEN + 1);
        seen_public |= is_public;
        seen_secret |= is_secret;
    }
    if (!seen_magic)
        return pt_error_set(err, PT_EPARSE, "%s: empty (no \"" KEYFILE_MAGIC " 1\" line)", src);
    if (!seen_public)
        return pt_error_set(err, PT_EPARSE, "%s: public: missing", src);
    k.has_secret = seen_secret;
    *out = k;
    return 0;
}

int pt_keyfile_load(const char *path, pt_keyfile *out, pt_error *err)
{
    memset(out, 0, sizeof *out);
    int fd;
    long long size;
    int rc = pt_file_open_regular(path, PT_KEYFILE_MAX, &fd, &size, err);
    if (rc < 0)
        return rc;
    struct stat st;
    char text[PT_KEYFILE_MAX + 1];
    size_t n = 0;
    ssize_t got;
    int ok = fstat(fd, &st) == 0;
    while (ok && n < sizeof text - 1 && (got = read(fd, text + n, sizeof text - 1 - n)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            ok = 0;
        else
            n += (size_t)got;
    }
    int e = errno;
    close(fd);
    if (!ok)
        return pt_error_set(err, PT_EIO, "%s: %s", path, strerror(e));
    pt_keyfile k;
    if ((rc = pt_keyfile_parse(text, n, path, &k, err)) < 0)
        return rc;
    if (st.st_uid != geteuid())
        return pt_error_set(err, PT_EINVAL,
                            "%s: owned by uid %u, not by this user (uid %u): a key file must be "
                            "the user's own, as ssh requires",
                            path, (unsigned)st.st_uid, (unsigned)geteuid());
    if (k.has_secret && (st.st_mode & 077))
        return pt_error_set(err, PT_EINVAL,
                            "%s: holds a secret key but its mode is %04o (readable or writable by "
                            "others); chmod 600 %s",
                            path, (unsigned)(st.st_mode & 07777), path);
    *out = k;
    return 0;
}

int pt_keyfile_format(const pt_keyfile *k, int with_secret, char *buf, size_t cap)
{
    int secret = with_secret && k->has_secret;
    int n = snprintf(buf, cap, "%s\n" KEYFILE_MAGIC " %d\npublic %s\n%s%s%s",
                     secret ? "# pipetop CURVE key pair: keep this file secret (mode 0600)"
                            : "# pipetop CURVE public key: give it to the peers that trust you",
                     PT_KEYFILE_VERSION, k->public_z85, secret ? "secret " : "",
                     secret ? k->secret_z85 : "", secret ? "\n" : "");
    if (n < 0 || (size_t)n >= cap)
        return PT_ERANGE;
    return n;
}

int pt_keyfile_write_pair(const char *base, const pt_keyfile *k, int overwrite, pt_error *err)
{
    char key_path[4096], pub_path[4096], text[512];
    if (snprintf(key_path, sizeof key_path, "%s.key", base) >= (int)sizeof key_path ||
        snprintf(pub_path, sizeof pub_path, "%s.pub", base) >= (int)sizeof pub_path)
        return pt_error_set(err, PT_EINVAL, "%s: name too long", base);
    if (!k->has_secret || !pt_key_z85_valid(k->public_z85) || !pt_key_z85_valid(k->secret_z85))
        return pt_error_set(err, PT_EINVAL, "%s: not a complete key pair", key_path);
    struct stat st;
    if (!overwrite && stat(key_path, &st) == 0)
        return pt_error_set(err, PT_EINVAL, "%s: exists; not replacing a key (remove it first)",
                            key_path);
    int n = pt_keyfile_format(k, 1, text, sizeof text);
    int rc;
    if (n < 0 || (rc = pt_file_write_atomic_mode(key_path, text, (size_t)n, 0600, err)) < 0)
        return n < 0 ? pt_error_set(err, n, "%s: key text too long", key_path) : rc;
    n = pt_keyfile_format(k, 0, text, sizeof text);
    if (n < 0 || (rc = pt_file_write_atomic_mode(pub_path, text, (size_t)n, 0644, err)) < 0)
        return n < 0 ? pt_error_set(err, n, "%s: key text too long", pub_path) : rc;
    return 0;
}

int pt_key_arg_public(const char *arg, char out[PT_KEY_Z85_LEN + 1], pt_error *err)
{
    out[0] = '\0';
    if (!arg || !arg[0])
        return pt_error_set(err, PT_EINVAL, "no key given");
    if (pt_key_z85_valid(arg)) {
        memcpy(out, arg, PT_KEY_Z85_LEN + 1);
        return 0;
    }
    pt_keyfile k;
    int rc = pt_keyfile_load(arg, &k, err);
    if (rc < 0)
        return rc;
    memcpy(out, k.public_z85, PT_KEY_Z85_LEN + 1);
    return 0;
}

int pt_allowlist_load(const char *path, char (*keys)[PT_KEY_Z85_LEN + 1], int cap, int *n,
                      pt_error *err)
{
    return pt_allowlist_load_named(path, keys, NULL, cap, n, err);
}

/* 1 when name is an agent name: 1..PT_ALLOW_NAME_MAX-1 of [A-Za-z0-9._:@-]. */
static int agent_name_valid(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len >= PT_ALLOW_NAME_MAX)
        return 0;
    for (; *name; name++)
        if (!((*name >= 'A' && *name <= 'Z') || (*name >= 'a' && *name <= 'z') ||
              (*name >= '0' && *name <= '9') || strchr("._:@-", *name)))
            return 0;
    return 1;
}

/* A word that may name a key file: a path of printable characters with no
 * ':' or '$' (what a password or shadow line has) and not longer than a
 * path we keep. */
static int key_file_like(const char *w)
{
    size_t n = strlen(w);
    if (n == 0 || n >= PT_ALLOWLIST_PATH_MAX)
        return 0;
    for (; *w; w++)
        if (*w < '!' || *w > '~' || *w == ':' || *w == '$')
            return 0;
    return 1;
}

int pt_allowlist_load_named(const char *path, char (*keys)[PT_KEY_Z85_LEN + 1],
                            char (*names)[PT_ALLOW_NAME_MAX], int cap, int *n, pt_error *err)
{
    *n = 0;
    char *text = NULL;
    size_t len = 0;
    int rc = pt_file_read(path, &text, &len, err);
    if (rc < 0)
        return rc;
    char dir[PT_ALLOWLIST_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = '\0';
    else
        dir[0] = '\0';
    int lineno = 0;
    for (char *line = text, *next; line && *line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        while (*line == ' ' || *line == '\t')
            line++;
        size_t w = strcspn(line, " \t\r");
        if (w == 0 || line[0] == '#')
            continue;
        /* a second word agent=NAME binds the key to that name */
        char *rest = line + w + (line[w] != '\0');
        line[w] = '\0';
        while (*rest == ' ' || *rest == '\t')
            rest++;
        const char *name = NULL;
        if (!strncmp(rest, PT_ALLOW_NAME_TAG, strlen(PT_ALLOW_NAME_TAG))) {
            name = rest + strlen(PT_ALLOW_NAME_TAG);
            rest[strcspn(rest, " \t\r")] = '\0';
            if (!agent_name_valid(name)) {
                rc = pt_error_set(err, PT_EPARSE,
                                  "%s: line %d: agent=: not an agent name (1-%d characters of "
                                  "[A-Za-z0-9._:@-])",
                                  path, lineno, PT_ALLOW_NAME_MAX - 1);
                break;
            }
        }
        if (*n >= cap) {
            rc = pt_error_set(err, PT_ERANGE, "%s: line %d: more than %d keys", path, lineno, cap);
            break;
        }
        char file[2 * PT_ALLOWLIST_PATH_MAX];
        const char *arg = line;
        if (!pt_key_z85_valid(line) && line[0] != '/') {
            snprintf(file, sizeof file, "%s%s", dir, line);
            arg = file;
        }
        /* what a bad line holds is not shown (it may be a secret, or
         * another file's text); a key file it names says what is wrong
         * with it, under its own name */
        pt_error sub = {0};
        if (!pt_key_z85_valid(line) && !key_file_like(line)) {
            rc = pt_error_set(err, PT_EPARSE,
                              "%s: line %d: not a Z85 public key (%d characters) nor the name "
                              "of a key file (the line's text is not shown)",
                              path, lineno, PT_KEY_Z85_LEN);
            break;
        }
        if ((rc = pt_key_arg_public(arg, keys[*n], &sub)) < 0) {
            /* the key file's own words, without its name (the line's text) */
            size_t skip = strlen(arg);
            const char *why = !strncmp(sub.msg, arg, skip) && sub.msg[skip] == ':'
                                  ? sub.msg + skip + 1 + (sub.msg[skip + 1] == ' ')
                                  : pt_strerror(rc);
            rc = pt_error_set(err, PT_EPARSE, "%s: line %d: the key file it names: %s", path,
                              lineno, why);
            break;
        }
        if (names)
            snprintf(names[*n], PT_ALLOW_NAME_MAX, "%s", name ? name : "");
        (*n)++;
    }
    free(text);
    if (rc < 0)
        *n = 0;
    return rc;
}
