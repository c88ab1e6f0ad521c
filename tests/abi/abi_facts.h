/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ABI test's unit of evidence: one fact, "this expression evaluates to that number",
 * where the expression is a sizeof, an offsetof, a slot position or an enum value taken
 * from the headers, and the number comes from plugin-abi.md. Tables of facts are built
 * in separate translation units (with and without nccl.h) and checked by one routine.
 */
#ifndef BR_ABI_FACTS_H_
#define BR_ABI_FACTS_H_

#include <stddef.h>

typedef struct {
    const char *what; /* the expression, as written */
    long long got;    /* what the headers say */
    long long want;   /* what plugin-abi.md says */
} abi_fact_t;

typedef struct {
    const char *name; /* the group, for messages ("net v12", "tuner", ...) */
    const abi_fact_t *facts;
    size_t n;
} abi_fact_table_t;

#define ABI_SIZE(type, n)                                                                          \
    {                                                                                              \
        "sizeof(" #type ")", (long long)sizeof(type), (n)                                          \
    }
#define ABI_OFF(type, member, n)                                                                   \
    {                                                                                              \
        "offsetof(" #type ", " #member ")", (long long)offsetof(type, member), (n)                 \
    }
/* Function member `member` sits in slot n: byte offset 8 * n on LP64. */
#define ABI_SLOT(type, member, n)                                                                  \
    {                                                                                              \
#type "." #member " in slot " #n, (long long)offsetof(type, member), 8LL * (n)             \
    }
#define ABI_VAL(expr, n)                                                                           \
    {                                                                                              \
#expr, (long long)(expr), (n)                                                              \
    }
#define ABI_TABLE(name, arr)                                                                       \
    {                                                                                              \
        (name), (arr), sizeof(arr) / sizeof((arr)[0])                                              \
    }

/* The tables: net and collnet (abi_layout_net.c), tuner, profiler, env and nccl.h
 * (abi_layout_other.c), both with nccl.h included first as the core does; and the
 * fallback declarations the plugin headers make when nccl.h is absent
 * (abi_layout_alone.c). */
const abi_fact_table_t *abi_net_tables(size_t *n_p);
const abi_fact_table_t *abi_other_tables(size_t *n_p);
const abi_fact_table_t *abi_alone_tables(size_t *n_p);
/* The parameter list of every function member (abi_signatures.c). */
const abi_fact_table_t *abi_signature_tables(size_t *n_p);

/* Check every fact of a table; print each mismatch to stderr; return the count. */
size_t abi_check_table(const abi_fact_table_t *table);

#endif /* BR_ABI_FACTS_H_ */
