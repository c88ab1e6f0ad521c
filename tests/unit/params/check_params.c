/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "params": the parameter table (core/common/params.def through
 * core/util/util_param.c). Every row must have a doc and a default that parses; values
 * follow NCCL's precedence (environment, then NCCL_CONF_FILE or ~/.nccl.conf, then the
 * default). The table loads once per process, so each precedence case runs in a child
 * forked here, which sets its environment before the first use and reports through its
 * exit status (a non-zero status is the number of the first failed check, whose detail
 * goes to stderr).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "param.h"

START_TEST(test_param_every_row_has_doc_key_and_parsable_default)
{
    int n = -1;
    const br_param_row_t *rows = br_param_table(&n);

    ck_assert_int_eq(n, BR_PARAM_COUNT);
    ck_assert_int_gt(n, 0);
    for (int i = 0; i < n; i++) {
        const br_param_row_t *r = &rows[i];
        int64_t v;
        ck_assert_ptr_nonnull(r->key);
        ck_assert_msg(strncmp(r->key, "NCCL_", 5) == 0 || strncmp(r->key, "BRAID_", 6) == 0,
                      "%s: keys start with NCCL_ or BRAID_", r->key);
        ck_assert_msg(r->doc != NULL && r->doc[0] != '\0', "%s has no doc", r->key);
        ck_assert_msg(r->def != NULL && br_param_parse(r->type, r->def, &v) == 0,
                      "%s: default '%s' does not parse as its type", r->key,
                      r->def != NULL ? r->def : "(null)");
        ck_assert_msg(r->type != BR_PTYPE_BOOL || v == 0 || v == 1, "%s: bool default", r->key);
        for (int j = 0; j < i; j++) {
            ck_assert_msg(strcmp(rows[j].key, r->key) != 0, "%s appears twice", r->key);
        }
    }
}
END_TEST

START_TEST(test_param_parse_accepts_and_rejects)
{
    int64_t v;
    ck_assert_int_eq(br_param_parse(BR_PTYPE_SIZE, "4K", &v), 0);
    ck_assert_int_eq(v, 4096);
    ck_assert_int_eq(br_param_parse(BR_PTYPE_SIZE, "1M", &v), 0);
    ck_assert_int_eq(v, 1 << 20);
    ck_assert_int_eq(br_param_parse(BR_PTYPE_SIZE, "2G", &v), 0);
    ck_assert_int_eq(v, 2ll << 30);
    ck_assert_int_eq(br_param_parse(BR_PTYPE_INT, "-3", &v), 0);
    ck_assert_int_eq(v, -3);
    ck_assert_int_eq(br_param_parse(BR_PTYPE_BOOL, "1", &v), 0);
    ck_assert_int_ne(br_param_parse(BR_PTYPE_BOOL, "2", &v), 0);
    ck_assert_int_ne(br_param_parse(BR_PTYPE_INT, "", &v), 0);
    ck_assert_int_ne(br_param_parse(BR_PTYPE_INT, "12abc", &v), 0);
    ck_assert_int_ne(br_param_parse(BR_PTYPE_SIZE, "-1", &v), 0);
    ck_assert_int_ne(br_param_parse(BR_PTYPE_SIZE, "1X", &v), 0);
    ck_assert_int_eq(br_param_parse(BR_PTYPE_STR, "", &v), 0);
}
END_TEST

/* ---- Precedence, in forked children ------------------------------------------------ */

#define CHILD_CHECK(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "check_params child, line %d: ", __LINE__);                            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            return __LINE__ % 250 + 1;                                                             \
        }                                                                                          \
    } while (0)

static const br_param_row_t *row_of(const char *key)
{
    int n;
    const br_param_row_t *rows = br_param_table(&n);
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].key, key) == 0) {
            return &rows[i];
        }
    }
    return NULL;
}

/* The keys the children set, cleared first so the caller's environment cannot leak in. */
static const char *const test_keys[] = {"BRAID_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_SOCKET_IFNAME",
                                        "BRAID_WAIT_WARN", "BRAID_SPIN",    "NCCL_CONF_FILE"};

static void clear_test_keys(void)
{
    for (size_t i = 0; i < sizeof(test_keys) / sizeof(test_keys[0]); i++) {
        unsetenv(test_keys[i]);
    }
}

/* A fresh directory holding one configuration file; its path goes in path (PATH_MAX). */
static int write_conf(char *dir, size_t dirlen, char *path, size_t pathlen, const char *name)
{
    snprintf(dir, dirlen, "/tmp/check_params.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        return -1;
    }
    snprintf(path, pathlen, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        return -1;
    }
    fputs("# a comment, then values; BRAID_NCHANNELS is also set in the environment\n"
          "BRAID_NCHANNELS=7\n"
          "  NCCL_BUFFSIZE=1M\n"
          "\n"
          "NCCL_SOCKET_IFNAME=lo\n"
          "BRAID_SPIN=5\n",
          f);
    return fclose(f);
}

static void remove_conf(const char *dir, const char *path)
{
    unlink(path);
    rmdir(dir);
}

/* The default of a row, unless /etc/nccl.conf (outside the test's control) exists. */
static int default_applies(void)
{
    return access("/etc/nccl.conf", F_OK) != 0;
}

static int child_env_beats_conf_file_beats_default(void)
{
    char dir[64], path[128];
    const br_param_row_t *r;

    clear_test_keys();
    CHILD_CHECK(write_conf(dir, sizeof(dir), path, sizeof(path), "nccl.conf") == 0, "conf file");
    setenv("NCCL_CONF_FILE", path, 1);
    setenv("BRAID_NCHANNELS", "5", 1);
    setenv("BRAID_SPIN", "not-a-number", 1);

    /* Environment over the file. */
    CHILD_CHECK(BR_PARAM_INT(NCHANNELS) == 5, "NCHANNELS %lld", (long long)BR_PARAM_INT(NCHANNELS));
    r = row_of("BRAID_NCHANNELS");
    CHILD_CHECK(r != NULL && strcmp(r->source, "environment") == 0, "NCHANNELS source %s",
                r != NULL ? r->source : "?");
    /* The file over the default, with the file's path as the source. */
    CHILD_CHECK(BR_PARAM_INT(BUFFSIZE) == 1 << 20, "BUFFSIZE %lld",
                (long long)BR_PARAM_INT(BUFFSIZE));
    r = row_of("NCCL_BUFFSIZE");
    CHILD_CHECK(r != NULL && strcmp(r->source, path) == 0, "BUFFSIZE source %s",
                r != NULL ? r->source : "?");
    CHILD_CHECK(BR_PARAM_STR(SOCKET_IFNAME) != NULL &&
                    strcmp(BR_PARAM_STR(SOCKET_IFNAME), "lo") == 0,
                "SOCKET_IFNAME %s", BR_PARAM_STR(SOCKET_IFNAME));
    /* An invalid environment value falls back to the default, not to the file. */
    r = row_of("BRAID_SPIN");
    CHILD_CHECK(r != NULL, "no BRAID_SPIN row");
    int64_t def;
    CHILD_CHECK(br_param_parse(r->type, r->def, &def) == 0, "BRAID_SPIN default");
    CHILD_CHECK(BR_PARAM_INT(SPIN) == def, "SPIN %lld", (long long)BR_PARAM_INT(SPIN));
    /* Untouched keys keep their defaults. */
    r = row_of("BRAID_WAIT_WARN");
    CHILD_CHECK(r != NULL && br_param_parse(r->type, r->def, &def) == 0, "WAIT_WARN row");
    if (default_applies()) {
        CHILD_CHECK(strcmp(r->source, "default") == 0, "WAIT_WARN source %s", r->source);
        CHILD_CHECK(BR_PARAM_INT(WAIT_WARN) == def, "WAIT_WARN %lld",
                    (long long)BR_PARAM_INT(WAIT_WARN));
    }
    /* Loaded once: later changes to the environment are not seen. */
    setenv("BRAID_NCHANNELS", "9", 1);
    CHILD_CHECK(BR_PARAM_INT(NCHANNELS) == 5, "NCHANNELS reloaded");
    remove_conf(dir, path);
    return 0;
}

static int child_home_conf_used_without_nccl_conf_file(void)
{
    char dir[64], path[128];

    clear_test_keys();
    CHILD_CHECK(write_conf(dir, sizeof(dir), path, sizeof(path), ".nccl.conf") == 0, "conf file");
    setenv("HOME", dir, 1);
    CHILD_CHECK(BR_PARAM_INT(NCHANNELS) == 7, "NCHANNELS %lld", (long long)BR_PARAM_INT(NCHANNELS));
    CHILD_CHECK(BR_PARAM_INT(SPIN) == 5, "SPIN %lld", (long long)BR_PARAM_INT(SPIN));
    CHILD_CHECK(strcmp(row_of("BRAID_SPIN")->source, path) == 0, "SPIN source %s",
                row_of("BRAID_SPIN")->source);
    remove_conf(dir, path);
    return 0;
}

static void run_in_child(int (*fn)(void), const char *name)
{
    int status;
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        _exit(fn());
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "%s failed in its child (status 0x%x; see stderr)", name, status);
}

START_TEST(test_param_environment_beats_conf_file_beats_default)
{
    run_in_child(child_env_beats_conf_file_beats_default, "precedence");
}
END_TEST

START_TEST(test_param_home_conf_read_when_no_conf_file_set)
{
    run_in_child(child_home_conf_used_without_nccl_conf_file, "~/.nccl.conf");
}
END_TEST

static Suite *params_suite(void)
{
    Suite *s = suite_create("params");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_param_every_row_has_doc_key_and_parsable_default);
    tcase_add_test(tc, test_param_parse_accepts_and_rejects);
    suite_add_tcase(s, tc);
    tc = tcase_create("precedence");
    tcase_add_test(tc, test_param_environment_beats_conf_file_beats_default);
    tcase_add_test(tc, test_param_home_conf_read_when_no_conf_file_set);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(params_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
