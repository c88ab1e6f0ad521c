/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small, strict XML reader and the tree it fills (br_xml_t: name, attributes, children
 * in order, and the line each element starts on). It takes what topology files need:
 * elements, attributes in double or single quotes, the five predefined entities and
 * numeric character references, comments, and <?...?> declarations. Anything else (text
 * between elements, CDATA, DOCTYPE, a tag left open, a closing tag that does not match,
 * a repeated attribute, a second root) is an error naming the file and line. No threads;
 * the tree belongs to the caller.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_int.h"
#include "util.h"

#define XML_MAX_DEPTH 64 /* NCCL's deepest trees are ~10 levels; this bounds recursion */

typedef struct {
    const char *p, *end;
    const char *file;
    int line;
} xml_in_t;

br_xml_t *br_topo_xml_new(br_xml_t *parent, const char *name)
{
    br_xml_t *e = calloc(1, sizeof(*e));
    if (e == NULL || (e->name = strdup(name)) == NULL) {
        free(e);
        BR_WARN(NCCL_ALLOC, "out of memory building an XML element <%s>", name);
        return NULL;
    }
    e->parent = parent;
    if (parent != NULL) {
        if (parent->last_kid != NULL) {
            parent->last_kid->next = e;
        } else {
            parent->kids = e;
        }
        parent->last_kid = e;
    }
    return e;
}

void br_topo_xml_free(br_xml_t *e)
{
    while (e != NULL) {
        br_xml_t *next = e->next;
        br_topo_xml_free(e->kids);
        for (int a = 0; a < e->nattrs; a++) {
            free(e->keys[a]);
            free(e->values[a]);
        }
        free(e->keys);
        free(e->values);
        free(e->name);
        free(e);
        e = next;
    }
}

void br_topo_xml_unlink(br_xml_t *e)
{
    br_xml_t *p = e->parent, *prev = NULL;
    if (p == NULL) {
        return;
    }
    for (br_xml_t *k = p->kids; k != NULL && k != e; k = k->next) {
        prev = k;
    }
    if (prev != NULL) {
        prev->next = e->next;
    } else {
        p->kids = e->next;
    }
    if (p->last_kid == e) {
        p->last_kid = prev;
    }
    e->parent = NULL;
    e->next = NULL;
}

/* Take ownership of value (malloc'ed); replaces an existing key. */
static ncclResult_t attr_put(br_xml_t *e, const char *key, char *value)
{
    for (int a = 0; a < e->nattrs; a++) {
        if (strcmp(e->keys[a], key) == 0) {
            free(e->values[a]);
            e->values[a] = value;
            return ncclSuccess;
        }
    }
    if (e->nattrs == e->cap_attrs) {
        int cap = e->cap_attrs ? 2 * e->cap_attrs : 8;
        char **k = realloc(e->keys, (size_t)cap * sizeof(*k));
        if (k != NULL) {
            e->keys = k;
        }
        char **v = k != NULL ? realloc(e->values, (size_t)cap * sizeof(*v)) : NULL;
        if (v == NULL) {
            free(value);
            BR_WARN(NCCL_ALLOC, "out of memory adding attribute %s to <%s>", key, e->name);
            return ncclSystemError;
        }
        e->values = v;
        e->cap_attrs = cap;
    }
    if ((e->keys[e->nattrs] = strdup(key)) == NULL) {
        free(value);
        BR_WARN(NCCL_ALLOC, "out of memory adding attribute %s to <%s>", key, e->name);
        return ncclSystemError;
    }
    e->values[e->nattrs++] = value;
    return ncclSuccess;
}

ncclResult_t br_topo_xml_set(br_xml_t *e, const char *key, const char *fmt, ...)
{
    va_list ap;
    char *value = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&value, fmt, ap);
    va_end(ap);
    if (n < 0) {
        BR_WARN(NCCL_ALLOC, "out of memory setting attribute %s of <%s>", key, e->name);
        return ncclSystemError;
    }
    return attr_put(e, key, value);
}

const char *br_topo_xml_get(const br_xml_t *e, const char *key)
{
    for (int a = 0; a < e->nattrs; a++) {
        if (strcmp(e->keys[a], key) == 0) {
            return e->values[a];
        }
    }
    return NULL;
}

br_xml_t *br_topo_xml_child(const br_xml_t *e, const char *name, const br_xml_t *after)
{
    for (br_xml_t *k = after != NULL ? after->next : e->kids; k != NULL; k = k->next) {
        if (name == NULL || strcmp(k->name, name) == 0) {
            return k;
        }
    }
    return NULL;
}

void br_topo_xml_put_attr(FILE *f, const char *key, const char *value)
{
    fprintf(f, " %s=\"", key);
    for (const char *c = value; *c != '\0'; c++) {
        switch (*c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*c, f); break;
        }
    }
    fputc('"', f);
}

/* ---- the reader ---- */

static ncclResult_t syntax(const xml_in_t *in, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ncclResult_t syntax(const xml_in_t *in, int line, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    BR_WARN(NCCL_GRAPH | NCCL_INIT, "%s:%d: %s", in->file, line, what);
    return ncclInvalidUsage;
}

/* Printable form of the character at p, for messages. */
static const char *shown(const xml_in_t *in, char *buf, size_t len)
{
    if (in->p >= in->end) {
        return "the end of the file";
    }
    unsigned char c = (unsigned char)*in->p;
    if (isprint(c)) {
        snprintf(buf, len, "'%c'", c);
    } else {
        snprintf(buf, len, "byte 0x%02x", c);
    }
    return buf;
}

static void skip_space(xml_in_t *in)
{
    while (in->p < in->end && isspace((unsigned char)*in->p)) {
        in->line += *in->p == '\n';
        in->p++;
    }
}

static int starts(const xml_in_t *in, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(in->end - in->p) >= n && memcmp(in->p, s, n) == 0;
}

/* Skip to just after `end`, counting lines; error when it never comes. */
static ncclResult_t skip_past(xml_in_t *in, const char *end, const char *what)
{
    int line = in->line;
    while (in->p < in->end && !starts(in, end)) {
        in->line += *in->p == '\n';
        in->p++;
    }
    if (in->p >= in->end) {
        return syntax(in, line, "%s never ends (no \"%s\")", what, end);
    }
    in->p += strlen(end);
    return ncclSuccess;
}

/* Comments and <?...?> declarations, with the white space around them. */
static ncclResult_t skip_misc(xml_in_t *in)
{
    for (;;) {
        skip_space(in);
        if (starts(in, "<!--")) {
            BR_CHECK(skip_past(in, "-->", "a comment"));
        } else if (starts(in, "<?")) {
            BR_CHECK(skip_past(in, "?>", "a <?...?> declaration"));
        } else {
            return ncclSuccess;
        }
    }
}

static int name_char(char c, int first)
{
    return isalpha((unsigned char)c) || c == '_' || c == ':' ||
           (!first && (isdigit((unsigned char)c) || c == '-' || c == '.'));
}

static ncclResult_t read_name(xml_in_t *in, const char *what, char **name_p)
{
    const char *s = in->p;
    char buf[16];
    while (in->p < in->end && name_char(*in->p, in->p == s)) {
        in->p++;
    }
    if (in->p == s) {
        return syntax(in, in->line, "expected %s, found %s", what, shown(in, buf, sizeof(buf)));
    }
    if ((*name_p = strndup(s, (size_t)(in->p - s))) == NULL) {
        BR_WARN(NCCL_ALLOC, "out of memory reading %s", in->file);
        return ncclSystemError;
    }
    return ncclSuccess;
}

/* Decode one entity at in->p ('&' seen) into out; returns bytes written or -1. */
static int entity(xml_in_t *in, char *out)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        if (starts(in, named[i].name)) {
            in->p += strlen(named[i].name);
            *out = named[i].c;
            return 1;
        }
    }
    if (starts(in, "&#")) {
        const char *s = in->p + 2;
        int hex = s < in->end && *s == 'x';
        char *stop;
        long v = strtol(s + hex, &stop, hex ? 16 : 10);
        if (stop > s + hex && stop < in->end && *stop == ';' && v > 0 && v < 128) {
            in->p = stop + 1;
            *out = (char)v; /* ASCII only: topology files need nothing more */
            return 1;
        }
    }
    return -1;
}

static ncclResult_t read_value(xml_in_t *in, const char *key, char **value_p)
{
    char quote, buf[16];
    int line = in->line;
    if (in->p >= in->end || (*in->p != '"' && *in->p != '\'')) {
        return syntax(in, line, "the value of attribute %s must be quoted, found %s", key,
                      shown(in, buf, sizeof(buf)));
    }
    quote = *in->p++;
    const char *s = in->p;
    while (in->p < in->end && *in->p != quote) {
        in->line += *in->p == '\n';
        in->p++;
    }
    if (in->p >= in->end) {
        return syntax(in, line, "the value of attribute %s never ends (no closing %c)", key, quote);
    }
    size_t len = (size_t)(in->p - s);
    char *v = malloc(len + 1), *o = v;
    if (v == NULL) {
        BR_WARN(NCCL_ALLOC, "out of memory reading %s", in->file);
        return ncclSystemError;
    }
    xml_in_t sub = {s, in->p, in->file, line};
    while (sub.p < sub.end) {
        if (*sub.p == '<') {
            free(v);
            return syntax(in, sub.line, "'<' in the value of attribute %s (write &lt;)", key);
        }
        if (*sub.p == '&') {
            if (entity(&sub, o) < 0) {
                free(v);
                return syntax(in, sub.line, "unknown entity in the value of attribute %s", key);
            }
            o++;
            continue;
        }
        sub.line += *sub.p == '\n';
        *o++ = *sub.p++;
    }
    *o = '\0';
    in->p++; /* the closing quote */
    *value_p = v;
    return ncclSuccess;
}

static ncclResult_t read_attrs(xml_in_t *in, br_xml_t *e)
{
    char buf[16];
    for (;;) {
        const char *before = in->p;
        skip_space(in);
        if (in->p >= in->end) {
            return syntax(in, e->line, "<%s> never ends (end of file inside the tag)", e->name);
        }
        if (*in->p == '>' || starts(in, "/>")) {
            return ncclSuccess;
        }
        if (in->p == before) {
            return syntax(in, in->line, "expected white space, '>' or '/>' in <%s>, found %s",
                          e->name, shown(in, buf, sizeof(buf)));
        }
        char *key = NULL, *value = NULL;
        BR_CHECK(read_name(in, "an attribute name", &key));
        if (br_topo_xml_get(e, key) != NULL) {
            ncclResult_t res =
                syntax(in, in->line, "attribute %s appears twice in <%s>", key, e->name);
            free(key);
            return res;
        }
        skip_space(in);
        if (in->p >= in->end || *in->p != '=') {
            ncclResult_t res = syntax(in, in->line, "expected '=' after attribute %s, found %s",
                                      key, shown(in, buf, sizeof(buf)));
            free(key);
            return res;
        }
        in->p++;
        skip_space(in);
        ncclResult_t res = read_value(in, key, &value);
        if (res == ncclSuccess) {
            res = attr_put(e, key, value);
        }
        free(key);
        BR_CHECK(res);
    }
}

static ncclResult_t read_element(xml_in_t *in, br_xml_t *parent, int depth, br_xml_t **e_p);

/* Children and the closing tag of e. */
static ncclResult_t read_content(xml_in_t *in, br_xml_t *e, int depth)
{
    char buf[16];
    for (;;) {
        BR_CHECK(skip_misc(in));
        if (in->p >= in->end) {
            return syntax(in, e->line, "<%s> is never closed (end of file)", e->name);
        }
        if (starts(in, "</")) {
            char *name = NULL;
            int line = in->line;
            in->p += 2;
            BR_CHECK(read_name(in, "a closing tag name", &name));
            int same = strcmp(name, e->name) == 0;
            skip_space(in);
            if (!same || in->p >= in->end || *in->p != '>') {
                ncclResult_t res = !same
                                       ? syntax(in, line, "</%s> closes <%s> opened at line %d",
                                                name, e->name, e->line)
                                       : syntax(in, in->line, "expected '>' to end </%s>, found %s",
                                                name, shown(in, buf, sizeof(buf)));
                free(name);
                return res;
            }
            free(name);
            in->p++;
            return ncclSuccess;
        }
        if (starts(in, "<![CDATA[") || starts(in, "<!")) {
            return syntax(in, in->line, "CDATA sections and declarations are not supported");
        }
        if (*in->p != '<') {
            return syntax(in, in->line,
                          "unexpected text %s inside <%s> (only elements belong "
                          "there)",
                          shown(in, buf, sizeof(buf)), e->name);
        }
        br_xml_t *kid = NULL;
        BR_CHECK(read_element(in, e, depth + 1, &kid));
    }
}

static ncclResult_t read_element(xml_in_t *in, br_xml_t *parent, int depth, br_xml_t **e_p)
{
    char *name = NULL;
    int line = in->line;
    if (depth > XML_MAX_DEPTH) {
        return syntax(in, line, "elements nested more than %d deep", XML_MAX_DEPTH);
    }
    in->p++; /* '<' */
    BR_CHECK(read_name(in, "an element name", &name));
    br_xml_t *e = br_topo_xml_new(parent, name);
    free(name);
    if (e == NULL) {
        return ncclSystemError;
    }
    e->line = line;
    *e_p = e; /* owned by parent (or returned to the caller for the root) from here */
    BR_CHECK(read_attrs(in, e));
    if (starts(in, "/>")) {
        in->p += 2;
        return ncclSuccess;
    }
    in->p++; /* '>' */
    return read_content(in, e, depth);
}

ncclResult_t br_topo_xml_parse(const char *text, size_t len, const char *file, br_xml_t **root_p)
{
    xml_in_t in = {text, text + len, file, 1};
    br_xml_t *root = NULL;
    char buf[16];
    ncclResult_t res;

    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) {
        in.p += 3; /* a UTF-8 byte order mark */
    }
    BR_CHECK_GOTO(skip_misc(&in), res, fail);
    if (in.p >= in.end) {
        res = syntax(&in, in.line, "no element (the file is empty)");
        goto fail;
    }
    if (starts(&in, "<!")) {
        res = syntax(&in, in.line, "DOCTYPE and other declarations are not supported");
        goto fail;
    }
    if (*in.p != '<') {
        res = syntax(&in, in.line, "expected '<' to open the first element, found %s",
                     shown(&in, buf, sizeof(buf)));
        goto fail;
    }
    BR_CHECK_GOTO(read_element(&in, NULL, 0, &root), res, fail);
    BR_CHECK_GOTO(skip_misc(&in), res, fail);
    if (in.p < in.end) {
        res = syntax(&in, in.line, "%s after the end of <%s> (one root element only)",
                     *in.p == '<' ? "another element" : "text", root->name);
        goto fail;
    }
    *root_p = root;
    return ncclSuccess;
fail:
    br_topo_xml_free(root);
    return res;
}
