/* Reading cJSON documents with errors that name the source, the field path
 * and the reason ("plan.json: stages[2].replicas[0]: must be >= 0 (got -1)").
 *
 * Internal to protocol/: the format parsers share it so every format reports
 * bad input the same way (docs/formats.md, "Errors"). A field is addressed by
 * the path of the object that holds it ("stages[2]", "" for the root) and its
 * key; every getter checks presence, type and range and, on failure, fills
 * the reader's pt_error and returns a negative PT_E* code. */
#ifndef PT_PROTOCOL_JSON_UTIL_H
#define PT_PROTOCOL_JSON_UTIL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/error.h"

/* Longest field path kept in messages ("layers[3].body[1].heads"). */
#define PT_JPATH_MAX 160

/* Integers in the formats travel as JSON numbers (doubles): beyond 2^53
 * they are no longer exact, so no integer field may exceed this. */
#define PT_JSON_INT_MAX 9007199254740992LL

/* The one format version this build reads and writes. */
#define PT_FORMAT_VERSION 1

typedef struct pt_jr {
    const char *source; /* names the text in messages, e.g. the file path */
    pt_error *err;      /* may be NULL */
} pt_jr;

/* Whether a field must be present. */
enum { PT_JR_OPTIONAL = 0, PT_JR_REQUIRED = 1 };

/* Parses text into *root (caller frees with cJSON_Delete), checks that it is
 * an object and that its "v" is PT_FORMAT_VERSION. On failure *root is NULL
 * and the error is PT_EPARSE ("src: not valid JSON near line 3") or
 * PT_EINVAL for a missing or wrong version. */
int pt_jr_parse(pt_jr *jr, const char *text, cJSON **root);
/* The checks pt_jr_parse makes of a document already parsed (one embedded
 * in another): an object, whose "v" is PT_FORMAT_VERSION. */
int pt_jr_check_root(pt_jr *jr, const cJSON *doc);

/* Records "source: path.key: reason" in jr->err and returns code. path may
 * be "" (root) and key NULL (the object itself). */
int pt_jr_fail(pt_jr *jr, int code, const char *path, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Writes "path.key" (or "key" when path is empty) into out. */
void pt_jr_join(char *out, size_t cap, const char *path, const char *key);
/* Writes "path.key[i]" (or "key[i]") into out. */
void pt_jr_join_index(char *out, size_t cap, const char *path, const char *key, int i);

/* Checks that obj (at path) holds only keys from known (NULL-terminated),
 * each at most once. Keys starting with '_' are comments and are skipped. */
int pt_jr_keys(pt_jr *jr, const cJSON *obj, const char *path, const char *const *known);

/* The member key of obj, or NULL. */
const cJSON *pt_jr_item(const cJSON *obj, const char *key);

/* An integer in [min, max]. When absent and optional, *out = def. */
int pt_jr_int64(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
                int64_t def, int64_t min, int64_t max, int64_t *out);
int pt_jr_int(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required, int def,
              int min, int max, int *out);

/* Range of a real number: lo/hi bounds and whether each is exclusive. A bound
 * of -INFINITY / INFINITY is no bound. Non-finite numbers are always refused. */
typedef struct pt_jr_range {
    double lo, hi;
    int lo_open, hi_open;
} pt_jr_range;

int pt_jr_num(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
              double def, pt_jr_range range, double *out);

/* A boolean; *out is 0 or 1. */
int pt_jr_bool(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
               int def, int *out);

/* A non-empty string shorter than cap, copied into out. When absent and
 * optional, def is copied (def may be NULL for ""). */
int pt_jr_str(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
              const char *def, char *out, size_t cap);

/* An object member; *out is NULL when absent and optional. */
int pt_jr_object(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
                 const cJSON **out);

/* An array member of at least min_len elements; *out is NULL and *len 0 when
 * absent and optional. */
int pt_jr_array(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
                int min_len, const cJSON **out, int *len);

/* An integer in [min, max] held directly by item, which sits at path (an
 * array element such as "stages[1].replicas[0]"). */
int pt_jr_elem_int(pt_jr *jr, const cJSON *item, const char *path, int min, int max, int *out);

/* Checks that elem (found at path) is an object. */
int pt_jr_is_object(pt_jr *jr, const cJSON *elem, const char *path);

/* Adds key: d to obj as the shortest decimal text that reads back as exactly
 * d ("0.1", "9007199254740992"), whatever the C locale. cJSON's own number
 * printer accepts a relative error of DBL_EPSILON, which breaks exact
 * round-trips of 16- and 17-digit values, so writers use this instead.
 * Returns 1 on success, 0 on no memory. A non-finite d is written as null. */
int pt_jr_add_number(cJSON *obj, const char *key, double d);

/* The double with the shortest decimal form that still reads back as f, so
 * a float field is written as 0.05 rather than 0.05000000074505806. */
double pt_jr_short_float(float f);

/* Prints root as indented JSON text ending in a newline and deletes root.
 * Returns a malloc'd string or NULL on no memory (root is deleted either
 * way; root may be NULL, which yields NULL). */
char *pt_jr_print_and_delete(cJSON *root);

#endif
