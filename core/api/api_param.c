/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL 2.32's parameter API over Braid's one parameter table (core/common/params.def):
 * a handle is a row of the table, read typed (range-checked), as text or as bytes; the
 * key-based calls read the same rows. Strings and key lists handed out live in per-thread
 * buffers, valid until the same call is made again on the same thread, as NCCL documents.
 * Values are the ones the library uses: environment, configuration files, env plugin,
 * default, in that order (util_param.c).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "util.h"

/* A handle is the address of one of these, one per row: never freed, never moved. */
struct ncclParamHandle {
    int id;
};

static struct ncclParamHandle handles[BR_PARAM_COUNT];
static pthread_once_t handles_once = PTHREAD_ONCE_INIT;

static void handles_init(void)
{
    for (int i = 0; i < BR_PARAM_COUNT; i++) {
        handles[i].id = i;
    }
}

static int row_find(const char *key)
{
    int n;
    const br_param_row_t *rows = br_param_table(&n);
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].key, key) == 0) {
            return i;
        }
    }
    return -1;
}

static const br_param_row_t *row_of(ncclParamHandle_t h, const char *fn)
{
    int n;
    const br_param_row_t *rows = br_param_table(&n);
    if (h == NULL || h < handles || h >= handles + BR_PARAM_COUNT) {
        BR_WARN(NCCL_ENV, "%s: %p is not a handle from ncclParamBind", fn, (void *)h);
        return NULL;
    }
    return &rows[h->id];
}

/* The value the library uses, as text (a bad value is replaced by the default). */
static void value_text(int id, const br_param_row_t *row, char *buf, size_t len)
{
    if (row->type == BR_PTYPE_STR) {
        const char *s = br_param_str((br_param_id_t)id);
        snprintf(buf, len, "%s", s != NULL ? s : "");
    } else {
        snprintf(buf, len, "%" PRId64, br_param_int((br_param_id_t)id));
    }
}

BR_API(ncclResult_t, ncclParamBind, (ncclParamHandle_t * out, const char *key))
{
    br_api_enter(NULL);
    if (out == NULL || key == NULL) {
        BR_WARN(NCCL_ENV, "ncclParamBind: %s is NULL", out == NULL ? "out" : "key");
        return ncclInvalidArgument;
    }
    int id = row_find(key);
    if (id < 0) {
        BR_WARN(NCCL_ENV,
                "ncclParamBind: '%s' is not a parameter of this library (braid-info --params "
                "lists them)",
                key);
        return ncclInvalidArgument;
    }
    pthread_once(&handles_once, handles_init);
    *out = &handles[id];
    return ncclSuccess;
}

/* The numeric value of h if it fits in [lo, hi]. */
static ncclResult_t get_int(ncclParamHandle_t h, const char *fn, int64_t lo, uint64_t hi,
                            int64_t *v_p)
{
    br_api_enter(NULL);
    const br_param_row_t *row = row_of(h, fn);
    if (row == NULL) {
        return ncclInvalidArgument;
    }
    if (row->type == BR_PTYPE_STR) {
        BR_WARN(NCCL_ENV, "%s: %s is a string parameter (read it with ncclParamGetStr)", fn,
                row->key);
        return ncclInvalidUsage;
    }
    int64_t v = br_param_int((br_param_id_t)h->id);
    if (v < lo || (v >= 0 && (uint64_t)v > hi)) {
        BR_WARN(NCCL_ENV, "%s: %s is %" PRId64 ", which does not fit the type asked for", fn,
                row->key, v);
        return ncclInvalidUsage;
    }
    *v_p = v;
    return ncclSuccess;
}

#define PARAM_GET_INT(name, ctype, lo, hi)                                                         \
    BR_API(ncclResult_t, name, (ncclParamHandle_t h, ctype * out))                                 \
    {                                                                                              \
        int64_t v;                                                                                 \
        if (out == NULL) {                                                                         \
            BR_WARN(NCCL_ENV, #name ": out is NULL");                                              \
            return ncclInvalidArgument;                                                            \
        }                                                                                          \
        BR_CHECK(get_int(h, #name, (lo), (hi), &v));                                               \
        *out = (ctype)v;                                                                           \
        return ncclSuccess;                                                                        \
    }

PARAM_GET_INT(ncclParamGetI8, int8_t, INT8_MIN, INT8_MAX)
PARAM_GET_INT(ncclParamGetI16, int16_t, INT16_MIN, INT16_MAX)
PARAM_GET_INT(ncclParamGetI32, int32_t, INT32_MIN, INT32_MAX)
PARAM_GET_INT(ncclParamGetI64, int64_t, INT64_MIN, INT64_MAX)
PARAM_GET_INT(ncclParamGetU8, uint8_t, 0, UINT8_MAX)
PARAM_GET_INT(ncclParamGetU16, uint16_t, 0, UINT16_MAX)
PARAM_GET_INT(ncclParamGetU32, uint32_t, 0, UINT32_MAX)
PARAM_GET_INT(ncclParamGetU64, uint64_t, 0, UINT64_MAX)

/* Long enough for every value in params.def and for any path a user sets. */
#define PARAM_TEXT_MAX 4096

static _Thread_local char str_buf[PARAM_TEXT_MAX];
static _Thread_local char key_buf[PARAM_TEXT_MAX];

BR_API(ncclResult_t, ncclParamGetStr, (ncclParamHandle_t h, const char **out))
{
    br_api_enter(NULL);
    const br_param_row_t *row = row_of(h, "ncclParamGetStr");
    if (row == NULL || out == NULL) {
        if (row != NULL) {
            BR_WARN(NCCL_ENV, "ncclParamGetStr: out is NULL");
        }
        return ncclInvalidArgument;
    }
    value_text(h->id, row, str_buf, sizeof(str_buf));
    *out = str_buf;
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclParamGet, (ncclParamHandle_t h, void *out, int maxLen, int *len))
{
    char text[PARAM_TEXT_MAX];
    int64_t v;
    const void *src = text;
    size_t n;

    br_api_enter(NULL);
    const br_param_row_t *row = row_of(h, "ncclParamGet");
    if (row == NULL) {
        return ncclInvalidArgument;
    }
    if (out == NULL || len == NULL || maxLen < 0) {
        BR_WARN(NCCL_ENV, "ncclParamGet: %s: out or len is NULL, or maxLen %d negative", row->key,
                maxLen);
        return ncclInvalidArgument;
    }
    /* Numbers as the int64_t the library holds, strings with their terminating NUL. */
    if (row->type == BR_PTYPE_STR) {
        value_text(h->id, row, text, sizeof(text));
        n = strlen(text) + 1;
    } else {
        v = br_param_int((br_param_id_t)h->id);
        src = &v;
        n = sizeof(v);
    }
    if (n > (size_t)maxLen) {
        BR_WARN(NCCL_ENV, "ncclParamGet: %s needs %zu bytes, maxLen is %d", row->key, n, maxLen);
        return ncclInvalidArgument;
    }
    memcpy(out, src, n);
    *len = (int)n;
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclParamGetParameter, (const char *key, const char **value, int *valueLen))
{
    int n;
    br_api_enter(NULL);
    if (key == NULL || value == NULL || valueLen == NULL) {
        BR_WARN(NCCL_ENV, "ncclParamGetParameter: key, value or valueLen is NULL");
        return ncclInvalidArgument;
    }
    int id = row_find(key);
    if (id < 0) {
        BR_WARN(NCCL_ENV, "ncclParamGetParameter: '%s' is not a parameter of this library", key);
        return ncclInvalidArgument;
    }
    value_text(id, &br_param_table(&n)[id], key_buf, sizeof(key_buf));
    *value = key_buf;
    *valueLen = (int)strlen(key_buf);
    return ncclSuccess;
}

static _Thread_local const char *key_table[BR_PARAM_COUNT];

BR_API(ncclResult_t, ncclParamGetAllParameterKeys, (const char ***table, int *tableLen))
{
    int n, k = 0;
    br_api_enter(NULL);
    if (table == NULL || tableLen == NULL) {
        BR_WARN(NCCL_ENV, "ncclParamGetAllParameterKeys: table or tableLen is NULL");
        return ncclInvalidArgument;
    }
    /* The documented (PUBLIC) ones, or all with NCCL_PARAM_DUMP_ALL, as NCCL. */
    int all = BR_PARAM_INT(PARAM_DUMP_ALL) != 0;
    const br_param_row_t *rows = br_param_table(&n);
    for (int i = 0; i < n; i++) {
        if (all || rows[i].level == BR_PLEVEL_PUBLIC) {
            key_table[k++] = rows[i].key;
        }
    }
    *table = key_table;
    *tableLen = k;
    return ncclSuccess;
}

BR_API(void, ncclParamDumpAll, (void))
{
    char text[PARAM_TEXT_MAX];
    int n;
    br_api_enter(NULL);
    int all = BR_PARAM_INT(PARAM_DUMP_ALL) != 0;
    const br_param_row_t *rows = br_param_table(&n);
    for (int i = 0; i < n; i++) {
        if (all || rows[i].level == BR_PLEVEL_PUBLIC) {
            value_text(i, &rows[i], text, sizeof(text));
            BR_INFO(NCCL_ENV, "%s %s (%s)", rows[i].key, text, rows[i].source);
        }
    }
}
