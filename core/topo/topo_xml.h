/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topo's small XML tree: the reader and writer behind topology files, also used by the
 * graph module for NCCL_GRAPH_FILE / NCCL_GRAPH_DUMP_FILE (NCCL's graph schema). Elements
 * with attributes only (no text), comments and <?...?> allowed. Not thread-shared: a
 * tree belongs to its caller.
 */
#ifndef BR_TOPO_XML_H_
#define BR_TOPO_XML_H_

#include <stdio.h>

#include "nccl.h"

typedef struct br_xml br_xml_t;
struct br_xml {
    char *name;
    int line; /* where the element starts */
    int nattrs, cap_attrs;
    char **keys, **values;
    br_xml_t *parent, *kids, *last_kid, *next;
};

/* Parse a whole document (one root element; comments and <?...?> allowed). A syntax
 * error fails with ncclInvalidUsage and a WARN "file:line: what". */
ncclResult_t br_topo_xml_parse(const char *text, size_t len, const char *file, br_xml_t **root_p);
/* A new element appended to parent's children (parent may be NULL); NULL when out of
 * memory (logged). */
br_xml_t *br_topo_xml_new(br_xml_t *parent, const char *name);
/* Set (or replace) an attribute; ncclSystemError when out of memory. */
ncclResult_t br_topo_xml_set(br_xml_t *e, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *br_topo_xml_get(const br_xml_t *e, const char *key);
/* First child named name (NULL: any) after `after` (NULL: from the first). */
br_xml_t *br_topo_xml_child(const br_xml_t *e, const char *name, const br_xml_t *after);
/* Unlink e from its parent (its children go with it). */
void br_topo_xml_unlink(br_xml_t *e);
void br_topo_xml_free(br_xml_t *e);
/* Write `key="value"` with the value escaped. */
void br_topo_xml_put_attr(FILE *f, const char *key, const char *value);

#endif /* BR_TOPO_XML_H_ */
