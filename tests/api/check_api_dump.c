/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "api_dump": the state dump (braidDumpState, BRAID_DUMP + SIGUSR1) explains a
 * hang across ranks. Ranks are forked processes using the public API only.
 *   hang     rank 1 blocks in Recv #1 from rank 0, which never sends it; rank 0, after
 *            earlier operations, blocks in AllReduce #2, which rank 1 never calls. One
 *            dump, written by rank 1's process (variant 0: a thread of it calls
 *            braidDumpState; variant 1: the test sends it SIGUSR1 with BRAID_DUMP set),
 *            must say both: rank 1 waits in Recv #1 for data from rank 0, and (asked
 *            live) rank 0 waits in AllReduce #2 for rank 1, its earlier operations done.
 *            Then both ranks abort. A child that rank 0 forks while its communicator is
 *            live lists no communicator and has SIGUSR1 back at its default.
 *   dead     rank 1 is SIGKILLed (variant 0) or SIGSTOPped (variant 1); rank 0's dump
 *            comes back and says rank 1 is unreachable, and why.
 *   threads  two ranks as threads of one process: its dump lists both communicators,
 *            each with the other as a peer that answered (its bootstrap thread, in the
 *            same process), the AllReduce both made done.
 *   race     a thread dumps in a loop while another aborts the communicator that a third
 *            is blocked on: every dump succeeds, the abort and the blocked call return,
 *            and (under ASan) nothing is touched after its free.
 *   handler  a SIGUSR1 handler the program installed first: Braid's goes in at init and
 *            calls it, the signal dumps, and destroy puts the program's back.
 *   empty    no live communicator: the dump is an empty list; no path and no BRAID_DUMP
 *            is refused with ncclInvalidArgument.
 * The JSON is parsed (a small parser below), not searched as text.
 */
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "braid.h"
#include "brt_launch.h"

/* ---- A small JSON parser: enough to walk the dump ---- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype_t;

typedef struct jval {
    jtype_t type;
    double num;
    char *str;           /* J_STR */
    char **keys;         /* J_OBJ: n keys */
    struct jval **items; /* J_ARR, J_OBJ: n values */
    int n;
} jval_t;

static void j_free(jval_t *v)
{
    if (v == NULL) {
        return;
    }
    for (int i = 0; i < v->n; i++) {
        j_free(v->items[i]);
        if (v->keys != NULL) {
            free(v->keys[i]);
        }
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

static void j_ws(const char **p)
{
    while (isspace((unsigned char)**p)) {
        (*p)++;
    }
}

static char *j_string(const char **p)
{
    size_t cap = 64, n = 0;
    char *s = malloc(cap);
    if (s == NULL || **p != '"') {
        free(s);
        return NULL;
    }
    for ((*p)++; **p != '"'; (*p)++) {
        char c = **p;
        if (c == '\0') {
            free(s);
            return NULL;
        }
        if (c == '\\') {
            (*p)++;
            c = **p;
            if (c == 'u') {
                unsigned u = 0;
                if (sscanf(*p + 1, "%4x", &u) != 1) {
                    free(s);
                    return NULL;
                }
                *p += 4;
                c = (char)(u < 0x80 ? u : '?');
            } else if (c == 'n') {
                c = '\n';
            } else if (c == 't') {
                c = '\t';
            } else if (c != '"' && c != '\\' && c != '/') {
                free(s);
                return NULL;
            }
        }
        if (n + 2 > cap) {
            char *t = realloc(s, cap *= 2);
            if (t == NULL) {
                free(s);
                return NULL;
            }
            s = t;
        }
        s[n++] = c;
    }
    (*p)++;
    s[n] = '\0';
    return s;
}

static jval_t *j_value(const char **p);

/* Append (key, value) to an array or object. */
static int j_push(jval_t *v, char *key, jval_t *item)
{
    jval_t **items = realloc(v->items, (size_t)(v->n + 1) * sizeof(*items));
    if (items == NULL) {
        return -1;
    }
    v->items = items;
    if (v->type == J_OBJ) {
        char **keys = realloc(v->keys, (size_t)(v->n + 1) * sizeof(*keys));
        if (keys == NULL) {
            return -1;
        }
        v->keys = keys;
        keys[v->n] = key;
    }
    items[v->n++] = item;
    return 0;
}

static jval_t *j_container(const char **p, jval_t *v, char close)
{
    (*p)++;
    j_ws(p);
    if (**p == close) {
        (*p)++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        j_ws(p);
        if (v->type == J_OBJ) {
            key = j_string(p);
            j_ws(p);
            if (key == NULL || **p != ':') {
                free(key);
                j_free(v);
                return NULL;
            }
            (*p)++;
        }
        jval_t *item = j_value(p);
        if (item == NULL || j_push(v, key, item) != 0) {
            free(key);
            j_free(item);
            j_free(v);
            return NULL;
        }
        j_ws(p);
        if (**p == ',') {
            (*p)++;
            continue;
        }
        if (**p == close) {
            (*p)++;
            return v;
        }
        j_free(v);
        return NULL;
    }
}

static jval_t *j_value(const char **p)
{
    jval_t *v = calloc(1, sizeof(*v));
    if (v == NULL) {
        return NULL;
    }
    j_ws(p);
    if (**p == '{' || **p == '[') {
        v->type = **p == '{' ? J_OBJ : J_ARR;
        return j_container(p, v, **p == '{' ? '}' : ']');
    }
    if (**p == '"') {
        v->type = J_STR;
        v->str = j_string(p);
        if (v->str == NULL) {
            j_free(v);
            return NULL;
        }
        return v;
    }
    if (strncmp(*p, "true", 4) == 0 || strncmp(*p, "null", 4) == 0) {
        v->type = **p == 't' ? J_BOOL : J_NULL;
        v->num = **p == 't';
        *p += 4;
        return v;
    }
    if (strncmp(*p, "false", 5) == 0) {
        v->type = J_BOOL;
        *p += 5;
        return v;
    }
    char *end;
    v->type = J_NUM;
    v->num = strtod(*p, &end);
    if (end == *p) {
        j_free(v);
        return NULL;
    }
    *p = end;
    return v;
}

/* Parse a whole text; NULL when it is not one JSON value. */
static jval_t *j_parse(const char *text)
{
    const char *p = text;
    jval_t *v = j_value(&p);
    j_ws(&p);
    if (v != NULL && *p != '\0') {
        j_free(v);
        return NULL;
    }
    return v;
}

static const jval_t *j_get(const jval_t *obj, const char *key)
{
    if (obj == NULL || obj->type != J_OBJ) {
        return NULL;
    }
    for (int i = 0; i < obj->n; i++) {
        if (strcmp(obj->keys[i], key) == 0) {
            return obj->items[i];
        }
    }
    return NULL;
}

static const char *j_str(const jval_t *obj, const char *key)
{
    const jval_t *v = j_get(obj, key);
    return v != NULL && v->type == J_STR ? v->str : "";
}

static double j_num(const jval_t *obj, const char *key)
{
    const jval_t *v = j_get(obj, key);
    return v != NULL && v->type == J_NUM ? v->num : -1;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    char *s = NULL;
    long n;
    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (s = malloc((size_t)n + 1)) != NULL) {
        s[fread(s, 1, (size_t)n, f)] = '\0';
    }
    fclose(f);
    return s;
}

/* The operation of comm object c with this function and sequence number, or NULL. */
static const jval_t *find_op(const jval_t *c, const char *func, int seq)
{
    const jval_t *ops = j_get(c, "ops");
    for (int i = 0; ops != NULL && ops->type == J_ARR && i < ops->n; i++) {
        if (strcmp(j_str(ops->items[i], "func"), func) == 0 && j_num(ops->items[i], "seq") == seq) {
            return ops->items[i];
        }
    }
    return NULL;
}

/* The peer object of rank r in comm object c, or NULL. */
static const jval_t *find_peer(const jval_t *c, int r)
{
    const jval_t *peers = j_get(c, "peers");
    for (int i = 0; peers != NULL && peers->type == J_ARR && i < peers->n; i++) {
        if (j_num(peers->items[i], "rank") == r) {
            return peers->items[i];
        }
    }
    return NULL;
}

/* ---- Shared state between the test and its ranks ---- */

#define FLOATS 256

typedef struct {
    volatile int blocked[2]; /* rank r is about to block in its last call */
    volatile int finish;     /* the dump is written: abort */
    volatile int go;         /* dead: rank 1 was killed or stopped, dump now */
    volatile int fork_ok;    /* hang: rank 0's forked child saw no communicator (1) */
    char fork_msg[512];
    int variant;
    char path[512]; /* where the dump goes (or the directory, for SIGUSR1) */
} shared_t;

static shared_t *shared_map(void)
{
    void *p =
        mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    memset(p, 0, sizeof(shared_t));
    return p;
}

static void make_dir(char *dir, size_t len, const char *what)
{
    snprintf(dir, len, "/tmp/braid-dump-%s-XXXXXX", what);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

typedef struct {
    ncclComm_t comm;
    shared_t *sh;
    int rank;
    ncclResult_t dump_res;
    int dump;    /* this thread writes the dump (braidDumpState) */
    int wait_go; /* ... once the test says go (else once both ranks block) */
} helper_t;

static int hang_file_ok(const char *path, char *why, size_t len);

/* A second thread of a rank: waits, maybe dumps, then aborts the communicator so the
 * blocked call returns. In the hang case it dumps again until the dump shows both ranks
 * waiting (on a loaded machine the blocked calls may take a while to get there). */
static void *helper_main(void *arg)
{
    helper_t *h = arg;
    double until = brt_now() + 60 * brt_time_scale();
    if (h->dump) {
        while (!(h->wait_go ? h->sh->go : h->sh->blocked[0] && h->sh->blocked[1]) &&
               brt_now() < until) {
            brt_sleep_ms(10);
        }
        char why[200];
        do {
            brt_sleep_ms(200);
            h->dump_res = braidDumpState(h->sh->path);
        } while (!h->wait_go && h->dump_res == ncclSuccess &&
                 !hang_file_ok(h->sh->path, why, sizeof(why)) && brt_now() < until);
        h->sh->finish = 1;
    }
    while (!h->sh->finish && brt_now() < until) {
        brt_sleep_ms(10);
    }
    ncclCommAbort(h->comm);
    return NULL;
}

/* Rank 0 forks while its communicator is live: the child must not see it as its own. */
static void fork_check(shared_t *sh)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction cur;
        char path[600];
        snprintf(path, sizeof(path), "%s.child", sh->path);
        sigaction(SIGUSR1, NULL, &cur);
        int dfl = !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL;
        ncclResult_t res = braidDumpState(path);
        char *text = read_text(path);
        jval_t *v = text != NULL ? j_parse(text) : NULL;
        const jval_t *list = j_get(v, "communicators");
        int ok = res == ncclSuccess && list != NULL && list->type == J_ARR && list->n == 0;
        snprintf(sh->fork_msg, sizeof(sh->fork_msg), "child: SIGUSR1 %s, dump %d: %.300s",
                 dfl ? "default" : "not default", (int)res, text != NULL ? text : "(none)");
        sh->fork_ok = ok && dfl ? 1 : -1;
        j_free(v);
        free(text);
        unlink(path);
        _exit(0);
    }
    if (pid > 0) {
        waitpid(pid, NULL, 0);
    }
}

static int body_hang(brt_rank_ctx_t *ctx)
{
    shared_t *sh = ctx->arg;
    float a[FLOATS];
    helper_t h = {0};
    pthread_t th;
    ncclResult_t res;

    for (int i = 0; i < FLOATS; i++) {
        a[i] = 1.0f;
    }
    if (brt_rank_init(ctx, &h.comm) != ncclSuccess) {
        return 1;
    }
    /* Earlier operations that every rank finishes: a message 0 -> 1, two AllReduces. */
    brt_doing(ctx, "the earlier operations");
    res = ctx->rank == 0 ? ncclSend(a, FLOATS, ncclFloat, 1, h.comm, NULL)
                         : ncclRecv(a, FLOATS, ncclFloat, 0, h.comm, NULL);
    for (int k = 0; k < 2 && res == ncclSuccess; k++) {
        res = ncclAllReduce(a, a, FLOATS, ncclFloat, ncclSum, h.comm, NULL);
    }
    if (res != ncclSuccess) {
        brt_fail(ctx, "an earlier operation failed: %s", ncclGetLastError(h.comm));
        return 1;
    }
    if (ctx->rank == 0) {
        fork_check(sh);
    }
    h.sh = sh;
    h.rank = ctx->rank;
    h.dump = ctx->rank == 1 && sh->variant == 0;
    if (pthread_create(&th, NULL, helper_main, &h) != 0) {
        brt_fail(ctx, "pthread_create failed");
        return 1;
    }
    sh->blocked[ctx->rank] = 1;
    if (ctx->rank == 0) {
        brt_doing(ctx, "AllReduce #2, which rank 1 never calls");
        res = ncclAllReduce(a, a, FLOATS, ncclFloat, ncclSum, h.comm, NULL);
    } else {
        brt_doing(ctx, "Recv #1 from rank 0, which never sends it");
        res = ncclRecv(a, FLOATS, ncclFloat, 0, h.comm, NULL);
    }
    pthread_join(th, NULL);
    if (res == ncclSuccess) {
        brt_fail(ctx, "the blocked call succeeded");
        return 1;
    }
    if (h.dump && h.dump_res != ncclSuccess) {
        brt_fail(ctx, "braidDumpState returned %d: %s", h.dump_res, ncclGetLastError(NULL));
        return 1;
    }
    return 0;
}

/* The dump's facts about the hang; "" when all hold, else what is wrong. */
static void check_hang(const jval_t *v, char *why, size_t len)
{
    const jval_t *list = j_get(v, "communicators");
    why[0] = '\0';
    if (list == NULL || list->type != J_ARR || list->n != 1) {
        snprintf(why, len, "no list of exactly one communicator");
        return;
    }
    const jval_t *c1 = list->items[0], *c0 = find_peer(c1, 0);
    const jval_t *recv = find_op(c1, "Recv", 1), *ar = c0 ? find_op(c0, "AllReduce", 2) : NULL;
    if (j_num(c1, "rank") != 1 || j_num(c1, "nranks") != 2 || strcmp(j_str(c1, "device"), "host")) {
        snprintf(why, len, "the communicator is not rank 1 of 2 on the host");
    } else if (recv == NULL || strcmp(j_str(recv, "state"), "waiting") != 0 ||
               j_num(recv, "waiting_for") != 0 || j_num(recv, "peer") != 0 ||
               strcmp(j_str(recv, "waiting_on"), "data from") != 0) {
        snprintf(why, len, "rank 1 is not waiting in Recv #1 for data from rank 0");
    } else if (c0 == NULL || strcmp(j_str(c0, "status"), "ok") != 0) {
        snprintf(why, len, "rank 0 is missing from the peers or not ok");
    } else if (ar == NULL || strcmp(j_str(ar, "state"), "waiting") != 0 ||
               j_num(ar, "waiting_for") != 1 || strcmp(j_str(ar, "op"), "sum") != 0 ||
               j_num(ar, "count") != FLOATS || strcmp(j_str(ar, "type"), "float32") != 0) {
        snprintf(why, len, "rank 0 is not waiting in AllReduce #2 (256 float32, sum) for rank 1");
    } else if (find_op(c0, "Send", 0) == NULL ||
               strcmp(j_str(find_op(c0, "Send", 0), "state"), "done") != 0 ||
               strcmp(j_str(find_op(c0, "AllReduce", 1), "state"), "done") != 0) {
        snprintf(why, len, "rank 0's earlier Send #0 and AllReduce #1 are not done");
    } else if (j_num(recv, "waiting_ms") < 0 || j_num(ar, "waiting_ms") < 0) {
        snprintf(why, len, "a waiting operation does not say for how long");
    }
}

static int hang_file_ok(const char *path, char *why, size_t len)
{
    char *text = read_text(path);
    jval_t *v = text != NULL ? j_parse(text) : NULL;
    snprintf(why, len, "no dump or not JSON");
    if (v != NULL) {
        check_hang(v, why, len);
    }
    j_free(v);
    free(text);
    return why[0] == '\0';
}

/* The one file in dir named sig-<host>-<pid>.json, with pid rank 1's. */
static int find_sig_file(const char *dir, pid_t pid, char *path, size_t len)
{
    char host[256] = "", want[400];
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;

    gethostname(host, sizeof(host) - 1);
    snprintf(want, sizeof(want), "sig-%s-%d.json", host, (int)pid);
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, want) == 0) {
            snprintf(path, len, "%s/%s", dir, e->d_name);
            found = 1;
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return found;
}

START_TEST(test_dump_hang)
{
    shared_t *sh = shared_map();
    char dir[256], file[700] = "", out[16384], why[200];
    brt_procs_t p;

    sh->variant = _i;
    make_dir(dir, sizeof(dir), "hang");
    if (_i == 0) {
        snprintf(sh->path, sizeof(sh->path), "%s/api.json", dir);
        snprintf(file, sizeof(file), "%s", sh->path);
    } else {
        char pattern[400];
        snprintf(pattern, sizeof(pattern), "%s/sig-%%h-%%p.json", dir);
        setenv("BRAID_DUMP", pattern, 1);
        snprintf(sh->path, sizeof(sh->path), "%s/fork.json", dir);
    }
    ck_assert_int_eq(brt_procs_start(&p, 2, body_hang, sh, out, sizeof(out)), 0);
    if (_i == 1) {
        double until = brt_now() + 60 * brt_time_scale();
        while (!(sh->blocked[0] && sh->blocked[1]) && brt_now() < until) {
            brt_sleep_ms(10);
        }
        /* Signal again until the dump shows both ranks waiting (see helper_main). */
        do {
            brt_sleep_ms(200);
            if (find_sig_file(dir, p.pids[1], file, sizeof(file))) {
                unlink(file);
            }
            kill(p.pids[1], SIGUSR1);
            while (!find_sig_file(dir, p.pids[1], file, sizeof(file)) && brt_now() < until) {
                brt_sleep_ms(10);
            }
        } while (!hang_file_ok(file, why, sizeof(why)) && brt_now() < until);
        sh->finish = 1;
    }
    int bad = brt_procs_wait(&p, brt_now() + 90 * brt_time_scale(), 0, out, sizeof(out), 0);
    ck_assert_msg(!bad, "variant %d: %s", _i, brt_clip(out, 3000));
    char *text = read_text(file);
    ck_assert_msg(text != NULL, "variant %d: no dump at %s", _i, file);
    fprintf(stderr, "---- %s ----\n%s", file, text);
    jval_t *v = j_parse(text);
    ck_assert_msg(v != NULL, "variant %d: the dump is not JSON: %.2000s", _i, text);
    check_hang(v, why, sizeof(why));
    ck_assert_msg(why[0] == '\0', "variant %d: %s: %.2000s", _i, why, text);
    ck_assert_msg(strcmp(j_str(v, "trigger"), _i == 0 ? "braidDumpState" : "SIGUSR1") == 0,
                  "variant %d: trigger %s", _i, j_str(v, "trigger"));
    ck_assert_msg(sh->fork_ok == 1, "a forked child: %s", sh->fork_msg);
    j_free(v);
    free(text);
    unlink(file);
    rmdir(dir);
    munmap(sh, sizeof(*sh));
}
END_TEST

/* dead: rank 0 blocks in a Recv from rank 1, its helper dumps once the test has killed or
 * stopped rank 1. */
static int body_dead(brt_rank_ctx_t *ctx)
{
    shared_t *sh = ctx->arg;
    float a[FLOATS] = {0};
    helper_t h = {0};
    pthread_t th;

    if (brt_rank_init(ctx, &h.comm) != ncclSuccess) {
        return 1;
    }
    if (ncclAllReduce(a, a, FLOATS, ncclFloat, ncclSum, h.comm, NULL) != ncclSuccess) {
        brt_fail(ctx, "AllReduce #0 failed: %s", ncclGetLastError(h.comm));
        return 1;
    }
    if (ctx->rank == 1) {
        sh->blocked[1] = 1;
        for (;;) {
            pause(); /* until the test kills it */
        }
    }
    h.sh = sh;
    h.dump = 1;
    h.wait_go = 1;
    if (pthread_create(&th, NULL, helper_main, &h) != 0) {
        brt_fail(ctx, "pthread_create failed");
        return 1;
    }
    sh->blocked[0] = 1;
    brt_doing(ctx, "Recv from rank 1, which is killed or stopped");
    (void)ncclRecv(a, FLOATS, ncclFloat, 1, h.comm, NULL); /* fails: dead peer, or abort */
    pthread_join(th, NULL);
    if (h.dump_res != ncclSuccess) {
        brt_fail(ctx, "braidDumpState returned %d: %s", h.dump_res, ncclGetLastError(NULL));
        return 1;
    }
    return 0;
}

START_TEST(test_dump_dead_peer)
{
    shared_t *sh = shared_map();
    char dir[256], out[16384];
    brt_procs_t p;
    double until = brt_now() + 60 * brt_time_scale();

    make_dir(dir, sizeof(dir), "dead");
    snprintf(sh->path, sizeof(sh->path), "%s/dead.json", dir);
    setenv("BRAID_DUMP_TIMEOUT", "1", 1);
    ck_assert_int_eq(brt_procs_start(&p, 2, body_dead, sh, out, sizeof(out)), 0);
    while (!(sh->blocked[0] && sh->blocked[1]) && brt_now() < until) {
        brt_sleep_ms(10);
    }
    brt_sleep_ms(200);
    if (_i == 0) {
        brt_procs_kill(&p, 1);
        while (!brt_procs_exited(&p, 1) && brt_now() < until) {
            brt_sleep_ms(10);
        }
    } else {
        kill(p.pids[1], SIGSTOP);
    }
    double t0 = brt_now();
    sh->go = 1;
    while (!sh->finish && brt_now() < until) {
        brt_sleep_ms(10);
    }
    double took = brt_now() - t0;
    if (_i == 1) {
        brt_procs_kill(&p, 1); /* SIGKILL ends a stopped process too */
    }
    int bad = brt_procs_wait(&p, brt_now() + 60 * brt_time_scale(), 1u << 1, out, sizeof(out), 0);
    ck_assert_msg(!bad, "variant %d: %s", _i, brt_clip(out, 3000));
    char *text = read_text(sh->path);
    ck_assert_msg(text != NULL, "variant %d: no dump", _i);
    fprintf(stderr, "---- %s: the dump came back %.2f s after rank 1 was %s ----\n%s", sh->path,
            took, _i == 0 ? "killed" : "stopped", text);
    jval_t *v = j_parse(text);
    ck_assert_msg(v != NULL, "variant %d: the dump is not JSON: %.2000s", _i, text);
    const jval_t *list = j_get(v, "communicators");
    ck_assert_msg(list != NULL && list->type == J_ARR && list->n == 1, "variant %d: %.2000s", _i,
                  text);
    const jval_t *p1 = find_peer(list->items[0], 1);
    const char *status = j_str(p1, "status");
    ck_assert_msg(p1 != NULL && strncmp(status, "unreachable: ", 13) == 0,
                  "variant %d: rank 1 is not unreachable: %.2000s", _i, text);
    ck_assert_msg(strstr(status, _i == 0 ? "exited" : "no answer") != NULL,
                  "variant %d: the reason does not say why: %s", _i, status);
    ck_assert_msg(j_num(p1, "pid") == p.pids[1], "variant %d: rank 1's pid is not %d: %.2000s", _i,
                  (int)p.pids[1], text);
    j_free(v);
    free(text);
    unlink(sh->path);
    rmdir(dir);
    munmap(sh, sizeof(*sh));
}
END_TEST

/* threads: both ranks in this process; rank 0 dumps once both finished an AllReduce. */
static _Atomic int threads_ready, threads_dumped;
static char threads_path[512];

static int body_threads(brt_rank_ctx_t *ctx)
{
    float a[FLOATS] = {0};
    ncclComm_t comm;
    int ok = 1;

    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    if (ncclAllReduce(a, a, FLOATS, ncclFloat, ncclSum, comm, NULL) != ncclSuccess) {
        brt_fail(ctx, "AllReduce failed: %s", ncclGetLastError(comm));
        ok = 0;
    }
    atomic_fetch_add(&threads_ready, 1);
    double until = brt_now() + 30 * brt_time_scale();
    if (ctx->rank == 0) {
        while (atomic_load(&threads_ready) < 2 && brt_now() < until) {
            brt_sleep_ms(5);
        }
        brt_doing(ctx, "braidDumpState");
        if (braidDumpState(threads_path) != ncclSuccess) {
            brt_fail(ctx, "braidDumpState failed: %s", ncclGetLastError(NULL));
            ok = 0;
        }
        atomic_store(&threads_dumped, 1);
    }
    while (!atomic_load(&threads_dumped) && brt_now() < until) {
        brt_sleep_ms(5);
    }
    ncclCommDestroy(comm);
    return ok ? 0 : 1;
}

START_TEST(test_dump_threads)
{
    char dir[256], out[8192];

    make_dir(dir, sizeof(dir), "threads");
    snprintf(threads_path, sizeof(threads_path), "%s/threads.json", dir);
    int bad = brt_threads_run(2, body_threads, NULL, 60 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
    char *text = read_text(threads_path);
    ck_assert_msg(text != NULL, "no dump at %s", threads_path);
    jval_t *v = j_parse(text);
    ck_assert_msg(v != NULL, "not JSON: %.2000s", text);
    const jval_t *list = j_get(v, "communicators");
    ck_assert_msg(list != NULL && list->type == J_ARR && list->n == 2, "not two: %.2000s", text);
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        const jval_t *c = list->items[i];
        int r = (int)j_num(c, "rank");
        const jval_t *peer = find_peer(c, 1 - r);
        ck_assert_msg(r == 0 || r == 1, "rank %d: %.2000s", r, text);
        seen |= 1 << r;
        ck_assert_msg(peer != NULL && strcmp(j_str(peer, "status"), "ok") == 0 &&
                          strcmp(j_str(peer, "commHash"), j_str(c, "commHash")) == 0,
                      "rank %d's peer did not answer: %.2000s", r, text);
        ck_assert_msg(find_op(c, "AllReduce", 0) != NULL &&
                          strcmp(j_str(find_op(peer, "AllReduce", 0), "state"), "done") == 0,
                      "rank %d: AllReduce #0 not done: %.2000s", r, text);
    }
    ck_assert_int_eq(seen, 3);
    j_free(v);
    free(text);
    unlink(threads_path);
    rmdir(dir);
}
END_TEST

/* race: rank 0 has a blocked AllReduce, a dumping thread and an aborting main thread. */
typedef struct {
    const char *path;
    _Atomic int stop;
    _Atomic int dumps, failed;
} race_t;

static void *race_dumper(void *arg)
{
    race_t *r = arg;
    while (!atomic_load(&r->stop)) {
        if (braidDumpState(r->path) != ncclSuccess) {
            atomic_fetch_add(&r->failed, 1);
        }
        atomic_fetch_add(&r->dumps, 1);
    }
    return NULL;
}

static void *race_blocked(void *arg)
{
    helper_t *h = arg;
    float a[FLOATS] = {0};
    h->dump_res = ncclAllReduce(a, a, FLOATS, ncclFloat, ncclSum, h->comm, NULL);
    return NULL;
}

static int body_race(brt_rank_ctx_t *ctx)
{
    shared_t *sh = ctx->arg;
    helper_t h = {0};
    race_t r = {.path = sh->path};
    pthread_t tb, td;

    if (brt_rank_init(ctx, &h.comm) != ncclSuccess) {
        return 1;
    }
    if (ctx->rank == 1) {
        brt_doing(ctx, "silent until rank 0 is done");
        double until = brt_now() + 60 * brt_time_scale();
        while (!sh->finish && brt_now() < until) {
            brt_sleep_ms(10);
        }
        ncclCommAbort(h.comm);
        return 0;
    }
    if (pthread_create(&tb, NULL, race_blocked, &h) != 0) {
        brt_fail(ctx, "pthread_create failed");
        return 1;
    }
    if (pthread_create(&td, NULL, race_dumper, &r) != 0) {
        brt_fail(ctx, "pthread_create failed");
        return 1;
    }
    brt_sleep_ms(300);
    brt_doing(ctx, "ncclCommAbort while another thread dumps");
    ncclResult_t res = ncclCommAbort(h.comm);
    pthread_join(tb, NULL);
    int before = atomic_load(&r.dumps);
    while (atomic_load(&r.dumps) <
           before + 3) { /* some dumps after the abort, of no communicator */
        brt_sleep_ms(5);
    }
    atomic_store(&r.stop, 1);
    pthread_join(td, NULL);
    sh->finish = 1;
    fprintf(stderr, "race: %d dumps, %d of them after the abort\n", atomic_load(&r.dumps),
            atomic_load(&r.dumps) - before);
    if (res != ncclSuccess || h.dump_res == ncclSuccess || atomic_load(&r.failed) > 0 ||
        atomic_load(&r.dumps) < 2) {
        brt_fail(ctx, "abort %d, blocked call %d, %d dumps of which %d failed", (int)res,
                 (int)h.dump_res, atomic_load(&r.dumps), atomic_load(&r.failed));
        return 1;
    }
    return 0;
}

START_TEST(test_dump_race_abort)
{
    shared_t *sh = shared_map();
    char dir[256], out[16384];

    make_dir(dir, sizeof(dir), "race");
    snprintf(sh->path, sizeof(sh->path), "%s/race.json", dir);
    int bad = brt_procs_run(2, body_race, sh, 60 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
    char *text = read_text(sh->path);
    jval_t *v = text != NULL ? j_parse(text) : NULL;
    const jval_t *list = j_get(v, "communicators");
    ck_assert_msg(list != NULL && list->type == J_ARR && list->n == 0,
                  "the last dump, after the abort, lists a communicator: %.2000s",
                  text != NULL ? text : "(none)");
    j_free(v);
    free(text);
    unlink(sh->path);
    rmdir(dir);
    munmap(sh, sizeof(*sh));
}
END_TEST

static volatile sig_atomic_t user_signals;

static void user_handler(int sig)
{
    (void)sig;
    user_signals++;
}

START_TEST(test_dump_chains_handler)
{
    char dir[256], pattern[400], file[600];
    struct sigaction sa, cur;
    ncclUniqueId id;
    ncclComm_t comm;

    make_dir(dir, sizeof(dir), "handler");
    snprintf(pattern, sizeof(pattern), "%s/h-%%n.json", dir);
    setenv("BRAID_DUMP", pattern, 1);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = user_handler;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
    sigaction(SIGUSR1, NULL, &cur);
    ck_assert_msg((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction != NULL,
                  "Braid's handler is not in place while a communicator is live");
    raise(SIGUSR1);
    ck_assert_int_eq(user_signals, 1); /* chained, synchronously */
    snprintf(file, sizeof(file), "%s/h-0.json", dir);
    double until = brt_now() + 20 * brt_time_scale();
    while (access(file, R_OK) != 0 && brt_now() < until) {
        brt_sleep_ms(10);
    }
    char *text = read_text(file);
    ck_assert_msg(text != NULL, "SIGUSR1 wrote no dump at %s", file);
    jval_t *v = j_parse(text);
    const jval_t *list = j_get(v, "communicators");
    ck_assert_msg(list != NULL && list->type == J_ARR && list->n == 1 &&
                      j_num(list->items[0], "nranks") == 1,
                  "not one communicator of one rank: %s", text);
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
    sigaction(SIGUSR1, NULL, &cur);
    ck_assert_msg(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == user_handler,
                  "destroy did not put the program's handler back");
    j_free(v);
    free(text);
    unlink(file);
    rmdir(dir);
}
END_TEST

START_TEST(test_dump_empty)
{
    char dir[256], pattern[400], file[600];

    make_dir(dir, sizeof(dir), "empty");
    snprintf(pattern, sizeof(pattern), "%s/e-%%p-%%n.json", dir);
    setenv("BRAID_DUMP", pattern, 1);
    ck_assert_int_eq(braidDumpState(NULL), ncclSuccess);
    snprintf(file, sizeof(file), "%s/e-%d-0.json", dir, (int)getpid());
    char *text = read_text(file);
    ck_assert_msg(text != NULL, "no dump at %s", file);
    jval_t *v = j_parse(text);
    ck_assert_msg(v != NULL, "not JSON: %s", text);
    const jval_t *list = j_get(v, "communicators");
    ck_assert_msg(list != NULL && list->type == J_ARR && list->n == 0, "not an empty list: %s",
                  text);
    ck_assert_int_eq((int)j_num(v, "pid"), (int)getpid());
    j_free(v);
    free(text);
    unlink(file);
    /* The second dump of the process is number 1. */
    ck_assert_int_eq(braidDumpState(NULL), ncclSuccess);
    snprintf(file, sizeof(file), "%s/e-%d-1.json", dir, (int)getpid());
    ck_assert_msg(access(file, R_OK) == 0, "no second dump at %s", file);
    unlink(file);
    rmdir(dir);
}
END_TEST

START_TEST(test_dump_no_path)
{
    unsetenv("BRAID_DUMP");
    ck_assert_int_eq(braidDumpState(NULL), ncclInvalidArgument);
    ck_assert_msg(strstr(ncclGetLastError(NULL), "BRAID_DUMP") != NULL, "%s",
                  ncclGetLastError(NULL));
    ck_assert_int_eq(braidDumpState("/nonexistent-dir/x.json"), ncclSystemError);
    ck_assert_msg(strstr(ncclGetLastError(NULL), "/nonexistent-dir/x.json") != NULL, "%s",
                  ncclGetLastError(NULL));
}
END_TEST

static Suite *api_dump_suite(void)
{
    Suite *s = suite_create("api_dump");
    TCase *tc = tcase_create("hang");
    tcase_set_timeout(tc, 120 * brt_time_scale());
    tcase_add_loop_test(tc, test_dump_hang, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("dead");
    tcase_set_timeout(tc, 120 * brt_time_scale());
    tcase_add_loop_test(tc, test_dump_dead_peer, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("threads");
    tcase_set_timeout(tc, 60 * brt_time_scale());
    tcase_add_test(tc, test_dump_threads);
    suite_add_tcase(s, tc);
    tc = tcase_create("race");
    tcase_set_timeout(tc, 60 * brt_time_scale());
    tcase_add_test(tc, test_dump_race_abort);
    suite_add_tcase(s, tc);
    tc = tcase_create("handler");
    tcase_set_timeout(tc, 30 * brt_time_scale());
    tcase_add_test(tc, test_dump_chains_handler);
    suite_add_tcase(s, tc);
    tc = tcase_create("empty");
    tcase_set_timeout(tc, 30 * brt_time_scale());
    tcase_add_test(tc, test_dump_empty);
    tcase_add_test(tc, test_dump_no_path);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(api_dump_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
