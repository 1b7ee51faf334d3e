#include "protocol/json_util.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pt_jr_join(char *out, size_t cap, const char *path, const char *key)
{
    if (!path || !*path)
        snprintf(out, cap, "%s", key ? key : "");
    else if (!key || !*key)
        snprintf(out, cap, "%s", path);
    else
        snprintf(out, cap, "%s.%s", path, key);
}

void pt_jr_join_index(char *out, size_t cap, const char *path, const char *key, int i)
{
    char base[PT_JPATH_MAX];
    pt_jr_join(base, sizeof base, path, key);
    snprintf(out, cap, "%s[%d]", base, i);
}

int pt_jr_fail(pt_jr *jr, int code, const char *path, const char *key, const char *fmt, ...)
{
    if (!jr->err)
        return code;
    char field[PT_JPATH_MAX], reason[PT_ERROR_MAX];
    pt_jr_join(field, sizeof field, path, key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    const char *src = jr->source && *jr->source ? jr->source : "<input>";
    if (*field)
        return pt_error_set(jr->err, code, "%.200s: %s: %s", src, field, reason);
    return pt_error_set(jr->err, code, "%.200s: %s", src, reason);
}

/* Where in text the parser stopped, as 1-based line and column. */
static void locate(const char *text, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    if (!at)
        return;
    for (const char *p = text; p < at && *p; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

int pt_jr_parse(pt_jr *jr, const char *text, cJSON **root)
{
    *root = NULL;
    if (!text)
        return pt_jr_fail(jr, PT_EINVAL, "", NULL, "no text to parse");
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithOpts(text, &end, 1);
    if (!doc) {
        int line, col;
        locate(text, end, &line, &col);
        const char *p = text;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            return pt_jr_fail(jr, PT_EPARSE, "", NULL, "not valid JSON near line %d: empty input",
                              line);
        return pt_jr_fail(jr, PT_EPARSE, "", NULL, "not valid JSON near line %d, column %d", line,
                          col);
    }
    int rc = pt_jr_check_root(jr, doc);
    if (rc < 0) {
        cJSON_Delete(doc);
        return rc;
    }
    *root = doc;
    return 0;
}

int pt_jr_check_root(pt_jr *jr, const cJSON *doc)
{
    if (!cJSON_IsObject(doc))
        return pt_jr_fail(jr, PT_EPARSE, "", NULL, "must be a JSON object ({...})");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, "v");
    int rc = 0;
    if (!v)
        rc = pt_jr_fail(jr, PT_EINVAL, "", "v", "missing (the format version; expected %d)",
                        PT_FORMAT_VERSION);
    else if (!cJSON_IsNumber(v))
        rc = pt_jr_fail(jr, PT_EINVAL, "", "v", "must be a number (the format version %d)",
                        PT_FORMAT_VERSION);
    else if (v->valuedouble != PT_FORMAT_VERSION)
        rc = pt_jr_fail(jr, PT_EINVAL, "", "v", "unsupported version %.15g (this build reads %d)",
                        v->valuedouble, PT_FORMAT_VERSION);
    return rc;
}

int pt_jr_keys(pt_jr *jr, const cJSON *obj, const char *path, const char *const *known)
{
    enum { MAX_KNOWN = 32 };
    int seen[MAX_KNOWN] = {0};
    for (const cJSON *c = obj ? obj->child : NULL; c; c = c->next) {
        if (!c->string || c->string[0] == '_')
            continue;
        int k = 0;
        while (known[k] && strcmp(known[k], c->string))
            k++;
        if (!known[k]) {
            char list[256] = "";
            size_t n = 0;
            for (int j = 0; known[j] && n < sizeof list; j++)
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", j ? ", " : "", known[j]);
            return pt_jr_fail(jr, PT_EINVAL, path, c->string, "unknown field (known: %s)", list);
        }
        if (k < MAX_KNOWN) {
            if (seen[k])
                return pt_jr_fail(jr, PT_EINVAL, path, c->string, "given twice");
            seen[k] = 1;
        }
    }
    return 0;
}

const cJSON *pt_jr_item(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* What a JSON value is, for "must be a number (got a string)". */
static const char *kind_of(const cJSON *item)
{
    if (cJSON_IsNull(item))
        return "null";
    if (cJSON_IsBool(item))
        return "a boolean";
    if (cJSON_IsNumber(item))
        return "a number";
    if (cJSON_IsString(item))
        return "a string";
    if (cJSON_IsArray(item))
        return "an array";
    if (cJSON_IsObject(item))
        return "an object";
    return "something else";
}

static int as_int64(pt_jr *jr, const cJSON *item, const char *path, const char *key, int64_t min,
                    int64_t max, int64_t *out)
{
    if (!cJSON_IsNumber(item))
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must be an integer (got %s)", kind_of(item));
    double d = item->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must be an integer (got %.15g)", d);
    if (d < (double)min) {
        if (min == 1)
            return pt_jr_fail(jr, PT_ERANGE, path, key, "must be > 0 (got %.15g)", d);
        return pt_jr_fail(jr, PT_ERANGE, path, key, "must be >= %lld (got %.15g)", (long long)min,
                          d);
    }
    if (d > (double)max)
        return pt_jr_fail(jr, PT_ERANGE, path, key, "must be <= %lld (got %.15g)", (long long)max,
                          d);
    *out = (int64_t)d;
    return 0;
}

int pt_jr_int64(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
                int64_t def, int64_t min, int64_t max, int64_t *out)
{
    const cJSON *item = pt_jr_item(obj, key);
    if (!item) {
        if (required)
            return pt_jr_fail(jr, PT_EINVAL, path, key, "missing");
        *out = def;
        return 0;
    }
    return as_int64(jr, item, path, key, min, max, out);
}

int pt_jr_int(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required, int def,
              int min, int max, int *out)
{
    int64_t v;
    int rc = pt_jr_int64(jr, obj, path, key, required, def, min, max, &v);
    if (rc == 0)
        *out = (int)v;
    return rc;
}

int pt_jr_elem_int(pt_jr *jr, const cJSON *item, const char *path, int min, int max, int *out)
{
    int64_t v;
    int rc = as_int64(jr, item, path, NULL, min, max, &v);
    if (rc == 0)
        *out = (int)v;
    return rc;
}

int pt_jr_num(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
              double def, pt_jr_range r, double *out)
{
    const cJSON *item = pt_jr_item(obj, key);
    if (!item) {
        if (required)
            return pt_jr_fail(jr, PT_EINVAL, path, key, "missing");
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(item))
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must be a number (got %s)", kind_of(item));
    double d = item->valuedouble;
    if (!isfinite(d))
        return pt_jr_fail(jr, PT_ERANGE, path, key, "must be a finite number");
    if (r.lo_open ? !(d > r.lo) : !(d >= r.lo))
        return pt_jr_fail(jr, PT_ERANGE, path, key, "must be %s %.15g (got %.15g)",
                          r.lo_open ? ">" : ">=", r.lo, d);
    if (r.hi_open ? !(d < r.hi) : !(d <= r.hi))
        return pt_jr_fail(jr, PT_ERANGE, path, key, "must be %s %.15g (got %.15g)",
                          r.hi_open ? "<" : "<=", r.hi, d);
    *out = d;
    return 0;
}

int pt_jr_bool(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
               int def, int *out)
{
    const cJSON *item = pt_jr_item(obj, key);
    if (!item) {
        if (required)
            return pt_jr_fail(jr, PT_EINVAL, path, key, "missing");
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(item))
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must be true or false (got %s)",
                          kind_of(item));
    *out = cJSON_IsTrue(item) ? 1 : 0;
    return 0;
}

int pt_jr_str(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
              const char *def, char *out, size_t cap)
{
    const cJSON *item = pt_jr_item(obj, key);
    if (!item) {
        if (required)
            return pt_jr_fail(jr, PT_EINVAL, path, key, "missing");
        snprintf(out, cap, "%s", def ? def : "");
        return 0;
    }
    if (!cJSON_IsString(item) || !item->valuestring)
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must be a string (got %s)", kind_of(item));
    size_t n = strlen(item->valuestring);
    if (n == 0)
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must not be empty");
    if (n >= cap)
        return pt_jr_fail(jr, PT_ERANGE, path, key, "too long (%zu characters, at most %zu)", n,
                          cap - 1);
    memcpy(out, item->valuestring, n + 1);
    return 0;
}

int pt_jr_object(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
                 const cJSON **out)
{
    *out = NULL;
    const cJSON *item = pt_jr_item(obj, key);
    if (!item) {
        if (required)
            return pt_jr_fail(jr, PT_EINVAL, path, key, "missing");
        return 0;
    }
    if (!cJSON_IsObject(item))
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must be an object (got %s)", kind_of(item));
    *out = item;
    return 0;
}

int pt_jr_array(pt_jr *jr, const cJSON *obj, const char *path, const char *key, int required,
                int min_len, const cJSON **out, int *len)
{
    *out = NULL;
    *len = 0;
    const cJSON *item = pt_jr_item(obj, key);
    if (!item) {
        if (required)
            return pt_jr_fail(jr, PT_EINVAL, path, key, "missing");
        return 0;
    }
    if (!cJSON_IsArray(item))
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must be an array (got %s)", kind_of(item));
    int n = cJSON_GetArraySize(item);
    if (n < min_len) {
        if (n == 0)
            return pt_jr_fail(jr, PT_EINVAL, path, key, "must not be empty");
        return pt_jr_fail(jr, PT_EINVAL, path, key, "must have at least %d elements (got %d)",
                          min_len, n);
    }
    *out = item;
    *len = n;
    return 0;
}

int pt_jr_is_object(pt_jr *jr, const cJSON *elem, const char *path)
{
    if (!cJSON_IsObject(elem))
        return pt_jr_fail(jr, PT_EINVAL, path, NULL, "must be an object (got %s)", kind_of(elem));
    return 0;
}

/* Exact integers of a double: up to 2^53 every integer is one. */
#define EXACT_INT_MAX 9007199254740992.0

int pt_jr_add_number(cJSON *obj, const char *key, double d)
{
    char buf[64];
    if (!isfinite(d)) {
        snprintf(buf, sizeof buf, "null");
    } else if (d == floor(d) && fabs(d) <= EXACT_INT_MAX) {
        snprintf(buf, sizeof buf, "%.0f", d);
    } else {
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(buf, sizeof buf, "%.*g", digits, d);
            if (strtod(buf, NULL) == d)
                break;
        }
        /* JSON wants '.', whatever LC_NUMERIC the program set. */
        const char *point = localeconv()->decimal_point;
        if (point && point[0] && point[0] != '.' && !point[1]) {
            char *p = strchr(buf, point[0]);
            if (p)
                *p = '.';
        }
    }
    return cJSON_AddRawToObject(obj, key, buf) != NULL;
}

double pt_jr_short_float(float f)
{
    if (!isfinite(f))
        return f;
    char buf[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return f;
}

char *pt_jr_print_and_delete(cJSON *root)
{
    if (!root)
        return NULL;
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return NULL;
    size_t n = strlen(text);
    char *out = malloc(n + 2);
    if (out) {
        memcpy(out, text, n);
        out[n] = '\n';
        out[n + 1] = '\0';
    }
    cJSON_free(text);
    return out;
}
