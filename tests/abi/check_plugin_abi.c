/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "abi": the binary facts of every plugin ABI version Braid declares, checked
 * against the numbers of plugin-abi.md, and the exported symbols of our built plugins.
 *
 *   layout        sizeof/offsetof of every struct, slot of every function member, enum
 *                 and constant values (tables in abi_layout_*.c)
 *   signatures    the parameter list of every function member (abi_signatures.c)
 *   exports       each plugin library under BR_ABI_LIB_DIR exports exactly its tables;
 *                 BR_ABI_REQUIRED lists the libraries that must exist (comma-separated)
 *
 * Each case reports every mismatch of its table on stderr before failing.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi_facts.h"
#include "abi_symbols.h"

size_t abi_check_table(const abi_fact_table_t *table)
{
    size_t bad = 0;

    for (size_t i = 0; i < table->n; i++) {
        const abi_fact_t *f = &table->facts[i];
        if (f->got != f->want) {
            fprintf(stderr, "[%s] %s is %lld, plugin-abi.md says %lld\n", table->name, f->what,
                    f->got, f->want);
            bad++;
        }
    }
    return bad;
}

/* The layout tables, concatenated, so one loop index picks one table. */
static const abi_fact_table_t *layout_table(int i)
{
    typedef const abi_fact_table_t *(*getter_t)(size_t *);
    static const getter_t getters[] = {abi_net_tables, abi_other_tables, abi_alone_tables};
    size_t n;

    for (size_t g = 0; g < sizeof(getters) / sizeof(getters[0]); g++) {
        const abi_fact_table_t *t = getters[g](&n);
        if ((size_t)i < n) {
            return &t[i];
        }
        i -= (int)n;
    }
    return NULL;
}

static int layout_table_count(void)
{
    int n = 0;
    while (layout_table(n) != NULL) {
        n++;
    }
    return n;
}

static void check_one_table(const abi_fact_table_t *t)
{
    size_t bad = abi_check_table(t);
    ck_assert_msg(bad == 0, "%zu of %zu facts of '%s' differ from plugin-abi.md (see stderr)", bad,
                  t->n, t->name);
}

START_TEST(test_abi_layout_matches_document)
{
    check_one_table(layout_table(_i));
}
END_TEST

START_TEST(test_abi_signature_matches_document)
{
    size_t n;
    check_one_table(&abi_signature_tables(&n)[_i]);
}
END_TEST

/* Is `file` in the comma-separated BR_ABI_REQUIRED list? */
static int plugin_is_required(const char *file)
{
    const char *list = getenv("BR_ABI_REQUIRED");
    size_t len = strlen(file);

    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, file, len) == 0) {
            return 1;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    return 0;
}

START_TEST(test_abi_plugin_exports_exactly_its_tables)
{
    const abi_plugin_t *plugin = &abi_plugins[_i];
    const char *dir = getenv("BR_ABI_LIB_DIR");
    char path[4096], err[2048];
    int problems;

    ck_assert_msg(dir != NULL, "BR_ABI_LIB_DIR is not set (CMake passes <build>/lib)");
    snprintf(path, sizeof(path), "%s/%s", dir, plugin->file);
    if (access(path, R_OK) != 0) {
        ck_assert_msg(!plugin_is_required(plugin->file), "%s was built but is missing", path);
        fprintf(stderr, "%s not built here; its exports are not checked\n", plugin->file);
        return;
    }
    problems = abi_check_exports(plugin, path, err, sizeof(err));
    ck_assert_msg(problems == 0, "%s: %s", plugin->file, err);
    problems = abi_check_dlsym(plugin, path, err, sizeof(err));
    ck_assert_msg(problems == 0, "%s: %s", plugin->file, err);
}
END_TEST

static Suite *abi_suite(void)
{
    Suite *s = suite_create("abi");
    TCase *tc;
    size_t n;

    tc = tcase_create("layout");
    tcase_add_loop_test(tc, test_abi_layout_matches_document, 0, layout_table_count());
    suite_add_tcase(s, tc);

    tc = tcase_create("signatures");
    abi_signature_tables(&n);
    tcase_add_loop_test(tc, test_abi_signature_matches_document, 0, (int)n);
    suite_add_tcase(s, tc);

    tc = tcase_create("exports");
    tcase_add_loop_test(tc, test_abi_plugin_exports_exactly_its_tables, 0, abi_nplugins);
    suite_add_tcase(s, tc);

    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(abi_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
