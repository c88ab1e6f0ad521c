/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the tuner's CSV configuration (format in tuner_config.h). Parsing is strict
 * on purpose: NCCL's example tuner silently maps unknown names to defaults and skips
 * lines with the wrong field count, so a typo there quietly changes nothing (or the
 * wrong thing). Here every problem fails init with the file name and line number.
 * Runs only in init, on the caller's thread; nothing here is shared between contexts.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plugin_log.h"
#include "tuner_config.h"

#include "check.h"

#define MAX_FIELDS 10
#define MIN_FIELDS 8

static const char *const coll_names[NCCL_NUM_FUNCTIONS] = {
    "broadcast", "reduce", "allgather", "reducescatter", "allreduce",
};
static const char *const algo_names[NCCL_NUM_ALGORITHMS] = {
    "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat",
};
static const char *const proto_names[NCCL_NUM_PROTOCOLS] = {"ll", "ll128", "simple"};

static const char *field_names[MAX_FIELDS] = {
    "collective", "minBytes", "maxBytes", "algorithm",  "protocol",
    "channels",   "nNodes",   "nRanks",   "numPipeOps", "regBuff",
};

const char *tuner_coll_name(int coll)
{
    return coll >= 0 && coll < NCCL_NUM_FUNCTIONS ? coll_names[coll] : "?";
}

const char *tuner_algo_name(int algo)
{
    return algo >= 0 && algo < NCCL_NUM_ALGORITHMS ? algo_names[algo] : "?";
}

const char *tuner_proto_name(int proto)
{
    return proto >= 0 && proto < NCCL_NUM_PROTOCOLS ? proto_names[proto] : "?";
}

/* Index of `s` (case-insensitive) in names[0..n), or -1. */
static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        if (strcasecmp(s, names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

/* Strip leading and trailing white space in place. */
static char *trim(char *s)
{
    char *end;

    while (isspace((unsigned char)*s)) {
        s++;
    }
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) {
        *--end = '\0';
    }
    return s;
}

/* A whole field of decimal digits, as uint64_t. */
static int parse_u64(const char *s, uint64_t *v_p)
{
    char *end = NULL;
    unsigned long long v;

    if (!isdigit((unsigned char)s[0])) {
        return -1;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') {
        return -1;
    }
    *v_p = (uint64_t)v;
    return 0;
}

/* A whole field holding -1 or an integer in [lo, hi]. */
static int parse_int(const char *s, int lo, int hi, int *v_p)
{
    char *end = NULL;
    long v;

    if (s[0] == '\0') {
        return -1;
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || (v != -1 && (v < lo || v > hi))) {
        return -1;
    }
    *v_p = (int)v;
    return 0;
}

/* Split `s` at commas into at most MAX_FIELDS trimmed fields; returns the count, or
 * MAX_FIELDS + 1 when there are more. */
static int split_fields(char *s, char **fields)
{
    int n = 0;

    for (char *p = s;; n++) {
        char *comma = strchr(p, ',');
        if (n == MAX_FIELDS) {
            return MAX_FIELDS + 1;
        }
        if (comma != NULL) {
            *comma = '\0';
        }
        fields[n] = trim(p);
        if (comma == NULL) {
            return n + 1;
        }
        p = comma + 1;
    }
}

#define NAMES_HINT_ALGO "tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat"

/* Fill the rule from its fields; on error describe which field and why. */
static int fields_to_rule(char **f, int n, tuner_rule_t *r, char *err, size_t errlen)
{
    int bad = -1, coll;

    r->pipe_ops = -1;
    r->reg_buff = -1;
    if ((coll = lookup(f[0], coll_names, NCCL_NUM_FUNCTIONS)) < 0) {
        snprintf(err, errlen,
                 "unknown collective '%s' (expected broadcast, reduce, allgather, "
                 "reducescatter or allreduce)",
                 f[0]);
        return -1;
    }
    r->coll = (ncclFunc_t)coll;
    if ((r->algo = lookup(f[3], algo_names, NCCL_NUM_ALGORITHMS)) < 0) {
        snprintf(err, errlen, "unknown algorithm '%s' (expected %s)", f[3], NAMES_HINT_ALGO);
        return -1;
    }
    if ((r->proto = lookup(f[4], proto_names, NCCL_NUM_PROTOCOLS)) < 0) {
        snprintf(err, errlen, "unknown protocol '%s' (expected ll, ll128 or simple)", f[4]);
        return -1;
    }
    if (parse_u64(f[1], &r->min_bytes) != 0) {
        bad = 1;
    } else if (parse_u64(f[2], &r->max_bytes) != 0) {
        bad = 2;
    } else if (parse_int(f[5], 1, 1 << 16, &r->channels) != 0) {
        bad = 5;
    } else if (parse_int(f[6], 1, 1 << 30, &r->nnodes) != 0) {
        bad = 6;
    } else if (parse_int(f[7], 1, 1 << 30, &r->nranks) != 0) {
        bad = 7;
    } else if (n > 8 && parse_int(f[8], 1, 1 << 30, &r->pipe_ops) != 0) {
        bad = 8;
    } else if (n > 9 && parse_int(f[9], 0, 1, &r->reg_buff) != 0) {
        bad = 9;
    }
    if (bad >= 0) {
        snprintf(err, errlen, "field %d (%s) '%s' is not %s", bad + 1, field_names[bad], f[bad],
                 bad <= 2   ? "an unsigned decimal byte count"
                 : bad == 9 ? "0, 1 or -1"
                            : "a positive integer or -1");
        return -1;
    }
    if (r->min_bytes > r->max_bytes) {
        snprintf(err, errlen, "minBytes %llu is larger than maxBytes %llu",
                 (unsigned long long)r->min_bytes, (unsigned long long)r->max_bytes);
        return -1;
    }
    return 0;
}

int tuner_config_parse_line(const char *text, tuner_rule_t *rule, char *err, size_t errlen)
{
    char *copy = strdup(text), *line, *fields[MAX_FIELDS];
    int n, ret;

    if (copy == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    line = trim(copy);
    if (line[0] == '\0' || line[0] == '#') {
        free(copy);
        return 0;
    }
    n = split_fields(line, fields);
    if (n < MIN_FIELDS || n > MAX_FIELDS) {
        snprintf(err, errlen,
                 "%s%d fields; expected 8 to 10 (collective, minBytes, maxBytes, "
                 "algorithm, protocol, channels, nNodes, nRanks[, numPipeOps[, regBuff]])",
                 n > MAX_FIELDS ? "more than " : "", n > MAX_FIELDS ? MAX_FIELDS : n);
        free(copy);
        return -1;
    }
    ret = fields_to_rule(fields, n, rule, err, errlen) == 0 ? 1 : -1;
    free(copy);
    return ret;
}

/* Append a rule, growing the array geometrically. */
static ncclResult_t append_rule(tuner_config_t *cfg, const tuner_rule_t *rule, int *cap)
{
    if (cfg->nrules == *cap) {
        int ncap = *cap == 0 ? 16 : 2 * *cap;
        tuner_rule_t *r = realloc(cfg->rules, (size_t)ncap * sizeof(*r));
        if (r == NULL) {
            BR_WARN(NCCL_TUNING, "out of memory reading tuner config %s", cfg->path);
            return ncclSystemError;
        }
        cfg->rules = r;
        *cap = ncap;
    }
    cfg->rules[cfg->nrules++] = *rule;
    return ncclSuccess;
}

static ncclResult_t read_rules(FILE *f, tuner_config_t *cfg)
{
    char *text = NULL, err[256];
    size_t textcap = 0;
    int cap = 0, lineno = 0;
    ncclResult_t res = ncclSuccess;
    tuner_rule_t rule;

    while (getline(&text, &textcap, f) >= 0) {
        lineno++;
        text[strcspn(text, "\r\n")] = '\0';
        int ret = tuner_config_parse_line(text, &rule, err, sizeof(err));
        if (ret < 0) {
            BR_WARN(NCCL_TUNING, "tuner config %s:%d: %s", cfg->path, lineno, err);
            res = ncclInvalidUsage;
            break;
        }
        if (ret > 0) {
            rule.line = lineno;
            BR_CHECK_GOTO(append_rule(cfg, &rule, &cap), res, out);
        }
    }
    if (res == ncclSuccess && ferror(f)) {
        BR_WARN(NCCL_TUNING, "tuner config %s: read error after line %d", cfg->path, lineno);
        res = ncclSystemError;
    }
out:
    free(text);
    return res;
}

ncclResult_t tuner_config_load(const char *path, int required, tuner_config_t *cfg)
{
    ncclResult_t res;
    FILE *f;

    memset(cfg, 0, sizeof(*cfg));
    f = fopen(path, "r");
    if (f == NULL) {
        if (required) {
            BR_WARN(NCCL_TUNING, "tuner config %s (NCCL_TUNER_CONFIG_FILE) cannot be opened: %s",
                    path, strerror(errno));
            return ncclInvalidUsage;
        }
        BR_INFO(NCCL_INIT | NCCL_TUNING, "no tuner config %s: the core's choices stand", path);
        return ncclSuccess;
    }
    snprintf(cfg->path, sizeof(cfg->path), "%s", path);
    res = read_rules(f, cfg);
    fclose(f);
    if (res != ncclSuccess) {
        tuner_config_free(cfg);
        return res;
    }
    BR_INFO(NCCL_INIT | NCCL_TUNING, "tuner config %s: %d rule%s", cfg->path, cfg->nrules,
            cfg->nrules == 1 ? "" : "s");
    return ncclSuccess;
}

void tuner_config_free(tuner_config_t *cfg)
{
    free(cfg->rules);
    cfg->rules = NULL;
    cfg->nrules = 0;
}
