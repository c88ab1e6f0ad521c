/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiler plugin conformance kit (Check suite "profiler_conformance"):
 *
 *   check_profiler_conformance <plugin.so> [--version N] [--braid-trace] [--trace-dir DIR]
 *
 * Loads ncclProfiler_v7 (or _v6, _v5, or the version named), inits it with a pointer to a
 * process-wide mask, and drives a synthetic event sequence per plugin-abi.md 3.6/3.7
 * for two ranks at once (API thread and proxy thread per rank; prof_kit.c): every call
 * must return ncclSuccess and the plugin must set the mask. A run is repeated for
 * several masks (through BRAID_PROFILER_MASK, which other plugins ignore), with a foreign
 * (PXN) parent, and with a tiny event pool. With --braid-trace the trace files of
 * Braid's profiler are checked too: one per rank, every async start has its stop, no
 * unterminated event, and exactly the events the kit got handles for. --trace-dir keeps
 * the traces of the default-mask run in DIR (for braid-trace-merge in CTest).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prof_kit.h"

#define RANKS 2
#define ITERS 50

static const char *plugin_path;
static int plugin_version;
static int braid_trace;
static const char *keep_dir;

static prof_kit_t kit;
static char tmpdir[256];

static void setup(void)
{
    char err[512];

    ck_assert_msg(prof_kit_open(plugin_path, plugin_version, &kit, err, sizeof(err)) == 0, "%s",
                  err);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/braid-prof-kit-XXXXXX");
    ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
    ck_assert_int_eq(setenv("BRAID_PROFILER_DIR", tmpdir, 1), 0);
    unsetenv("BRAID_PROFILER_MASK");
    unsetenv("BRAID_PROFILER_EVENTS");
    prof_kit_mask = 0;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[600];

    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    rmdir(dir);
}

static void teardown(void)
{
    remove_dir(tmpdir);
    prof_kit_close(&kit);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len;

    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)len + 1)) != NULL) {
        buf[fread(buf, 1, (size_t)len, f)] = '\0';
    }
    fclose(f);
    return buf;
}

static long count_str(const char *hay, const char *needle)
{
    long n = 0;

    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) {
        n++;
    }
    return n;
}

/* Minimal checks of Braid's trace files (the format is documented in docs/plugins.md;
 * braid-trace-merge does the full structural validation). */
static void check_braid_traces(const char *dir, uint64_t hash, const prof_kit_stats_t *st)
{
    long x = 0, b = 0, e = 0;
    char path[600], needle[64];

    for (int r = 0; r < RANKS; r++) {
        snprintf(path, sizeof(path), "%s/braid-trace-%016llx-r%d.json", dir,
                 (unsigned long long)hash, r);
        char *text = read_all(path);
        ck_assert_msg(text != NULL, "no trace file %s", path);
        ck_assert_msg(text[0] == '{' && strstr(text, "\"traceEvents\":[") != NULL &&
                          strstr(text, "]}") != NULL,
                      "%s is not a Chrome trace object", path);
        ck_assert_msg(strstr(text, "unterminated") == NULL, "%s has unterminated events", path);
        snprintf(needle, sizeof(needle), "\"commHash\":\"0x%016llx\"", (unsigned long long)hash);
        ck_assert_msg(strstr(text, needle) != NULL, "%s does not carry %s", path, needle);
        snprintf(needle, sizeof(needle), "\"pid\":%d,", r);
        ck_assert_msg(strstr(text, needle) != NULL, "%s has no events with pid %d", path, r);
        ck_assert_msg(count_str(text, "\"ph\":\"B\"") == 0, "%s has unmatched B events", path);
        x += count_str(text, "\"ph\":\"X\"");
        b += count_str(text, "\"ph\":\"b\"");
        e += count_str(text, "\"ph\":\"e\"");
        free(text);
    }
    ck_assert_msg(b == e, "%ld async starts but %ld stops", b, e);
    ck_assert_msg(x == st->sync_events, "%ld complete events written, %ld started", x,
                  st->sync_events);
    ck_assert_msg(b == st->async_events, "%ld async events written, %ld started", b,
                  st->async_events);
}

START_TEST(test_profiler_table_has_name_and_members)
{
    const void *const *slots = kit.table;

    ck_assert_msg(kit.name != NULL && kit.name[0] != '\0', "the profiler table has no name");
    for (int i = 1; i <= 5; i++) {
        ck_assert_msg(slots[i] != NULL, "slot %d of ncclProfiler_v%d is NULL", i, kit.version);
    }
    fprintf(stderr, "profiler '%s', ncclProfiler_v%d\n", kit.name, kit.version);
}
END_TEST

START_TEST(test_profiler_init_sets_mask)
{
    prof_kit_stats_t st;
    char err[256];

    ck_assert_msg(prof_kit_run(&kit, 0x1111, 1, 0, &st, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(prof_kit_mask != 0, "init did not set the activation mask");
}
END_TEST

/* Masks the plugin is asked to set (Braid's profiler reads BRAID_PROFILER_MASK):
 * its default, ProxyStep only (the core then emits the ancestors too), CollApi only,
 * and every v6 type including ProxyCtrl and CE. */
static const char *const masks[] = {NULL, "16", "512", "32767"};

START_TEST(test_profiler_synthetic_run)
{
    uint64_t hash = 0xb4a1d00000000000ull + (uint64_t)_i;
    const char *dir = (_i == 0 && keep_dir != NULL) ? keep_dir : tmpdir;
    prof_kit_stats_t st;
    char err[256];

    if (masks[_i] != NULL) {
        ck_assert_int_eq(setenv("BRAID_PROFILER_MASK", masks[_i], 1), 0);
    }
    if (dir == keep_dir) {
        remove_dir(keep_dir); /* no stale traces for braid-trace-merge to count */
        mkdir(keep_dir, 0755);
        ck_assert_int_eq(setenv("BRAID_PROFILER_DIR", keep_dir, 1), 0);
    }
    ck_assert_msg(prof_kit_run(&kit, hash, RANKS, ITERS, &st, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(prof_kit_mask != 0, "init did not set the activation mask");
    fprintf(stderr, "mask 0x%x: %ld calls, %ld complete + %ld async events, %ld dropped\n",
            prof_kit_mask, st.calls, st.sync_events, st.async_events, st.dropped);
    if (braid_trace) {
        ck_assert_msg(st.dropped == 0, "events dropped with the default pool");
        check_braid_traces(dir, hash, &st);
    }
}
END_TEST

START_TEST(test_profiler_foreign_parent_is_not_touched)
{
    char err[256];

    ck_assert_msg(prof_kit_foreign_parent(&kit, err, sizeof(err)) == 0, "%s", err);
}
END_TEST

START_TEST(test_profiler_full_pool_drops_cleanly)
{
    uint64_t hash = 0xf011;
    prof_kit_stats_t st;
    char err[256];

    ck_assert_int_eq(setenv("BRAID_PROFILER_EVENTS", "50", 1), 0);
    ck_assert_msg(prof_kit_run(&kit, hash, RANKS, 20, &st, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(st.dropped > 0, "a 50-event pool kept %ld events",
                  st.sync_events + st.async_events);
    check_braid_traces(tmpdir, hash, &st);
}
END_TEST

static Suite *profiler_suite(void)
{
    Suite *s = suite_create("profiler_conformance");
    TCase *tc = tcase_create("abi");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_profiler_table_has_name_and_members);
    tcase_add_test(tc, test_profiler_init_sets_mask);
    tcase_add_loop_test(tc, test_profiler_synthetic_run, 0,
                        (int)(sizeof(masks) / sizeof(masks[0])));
    tcase_add_test(tc, test_profiler_foreign_parent_is_not_touched);
    if (braid_trace) {
        tcase_add_test(tc, test_profiler_full_pool_drops_cleanly);
    }
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    SRunner *sr;
    int failed;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0 && i + 1 < argc) {
            plugin_version = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--trace-dir") == 0 && i + 1 < argc) {
            keep_dir = argv[++i];
        } else if (strcmp(argv[i], "--braid-trace") == 0) {
            braid_trace = 1;
        } else if (argv[i][0] != '-' && plugin_path == NULL) {
            plugin_path = argv[i];
        } else {
            plugin_path = NULL;
            break;
        }
    }
    if (plugin_path == NULL) {
        fprintf(stderr,
                "usage: %s <profiler-plugin.so> [--version N] [--braid-trace] [--trace-dir D]\n",
                argv[0]);
        return 2;
    }
    sr = srunner_create(profiler_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
