/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The logger: NCCL_DEBUG level, NCCL_DEBUG_SUBSYS mask (names and bits as NCCL's, ^ to
 * exclude), NCCL_DEBUG_FILE (%h host, %p pid). Lines read "host:pid:tid [rank] NCCL INFO
 * msg"; WARN lines add file:line. Every WARN is also kept, per thread and per process,
 * as the text behind ncclGetLastError(). Also: time, host identity and small helpers.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define LAST_ERROR_MAX 2048

_Atomic int br_log_level = -1;
_Atomic unsigned long br_log_mask = NCCL_INIT | NCCL_BOOTSTRAP | NCCL_ENV;

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file;
static char host_name[256];
static _Thread_local int log_rank = -1;
static _Thread_local char thread_last_error[LAST_ERROR_MAX];
static char process_last_error[LAST_ERROR_MAX];

static const struct {
    const char *name;
    unsigned long bit;
} subsys_names[] = {
    {"INIT", NCCL_INIT},
    {"COLL", NCCL_COLL},
    {"P2P", NCCL_P2P},
    {"SHM", NCCL_SHM},
    {"NET", NCCL_NET},
    {"GRAPH", NCCL_GRAPH},
    {"TUNING", NCCL_TUNING},
    {"ENV", NCCL_ENV},
    {"ALLOC", NCCL_ALLOC},
    {"CALL", NCCL_CALL},
    {"PROXY", NCCL_PROXY},
    {"NVLS", NCCL_NVLS},
    {"BOOTSTRAP", NCCL_BOOTSTRAP},
    {"REG", NCCL_REG},
    {"PROFILE", NCCL_PROFILE},
    {"RAS", NCCL_RAS},
    {"DESTROY", NCCL_DESTROY},
    {"ALLOC_HOST", NCCL_ALLOC_HOST},
    {"ALL", (unsigned long)NCCL_ALL},
};

static unsigned long parse_subsys(const char *spec)
{
    unsigned long mask = 0;
    int invert = 0;
    char buf[512];

    if (spec == NULL) {
        return NCCL_INIT | NCCL_BOOTSTRAP | NCCL_ENV;
    }
    if (spec[0] == '^') {
        invert = 1;
        spec++;
    }
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++) {
            if (strcasecmp(tok, subsys_names[i].name) == 0) {
                mask |= subsys_names[i].bit;
            }
        }
    }
    return invert ? ~mask : mask;
}

static int parse_level(const char *s)
{
    if (s == NULL) {
        return NCCL_LOG_NONE;
    }
    if (strcasecmp(s, "VERSION") == 0) {
        return NCCL_LOG_VERSION;
    }
    if (strcasecmp(s, "WARN") == 0) {
        return NCCL_LOG_WARN;
    }
    if (strcasecmp(s, "INFO") == 0) {
        return NCCL_LOG_INFO;
    }
    if (strcasecmp(s, "ABORT") == 0) {
        return NCCL_LOG_ABORT;
    }
    if (strcasecmp(s, "TRACE") == 0) {
        return NCCL_LOG_TRACE;
    }
    return NCCL_LOG_NONE;
}

/* Expand %h and %p in NCCL_DEBUG_FILE and open it line-buffered. */
static FILE *open_log_file(const char *pattern)
{
    char path[4096];
    size_t n = 0;

    for (const char *p = pattern; *p != '\0' && n + 1 < sizeof(path); p++) {
        if (p[0] == '%' && p[1] == 'h') {
            n += (size_t)snprintf(path + n, sizeof(path) - n, "%s", host_name);
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            n += (size_t)snprintf(path + n, sizeof(path) - n, "%d", (int)getpid());
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            path[n++] = '%';
            p++;
        } else {
            path[n++] = *p;
        }
        if (n >= sizeof(path)) {
            n = sizeof(path) - 1;
        }
    }
    path[n] = '\0';
    FILE *f = fopen(path, "w");
    if (f != NULL) {
        setvbuf(f, NULL, _IOLBF, 0);
    }
    return f;
}

static void log_load(void)
{
    int level;
    const char *file;

    gethostname(host_name, sizeof(host_name) - 1);
    char *dot = strchr(host_name, '.');
    if (dot != NULL) {
        *dot = '\0';
    }
    level = parse_level(BR_PARAM_STR(DEBUG));
    file = BR_PARAM_STR(DEBUG_FILE);
    log_file = stdout;
    if (file != NULL && level > NCCL_LOG_VERSION) {
        FILE *f = open_log_file(file);
        if (f != NULL) {
            log_file = f;
        }
    }
    atomic_store(&br_log_mask, parse_subsys(BR_PARAM_STR(DEBUG_SUBSYS)));
    atomic_store(&br_log_level, level);
    if (level >= NCCL_LOG_VERSION) {
        br_log_write(NCCL_LOG_VERSION, NCCL_INIT, __FILE__, __LINE__, "NCCL version %d.%d.%d+braid",
                     NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    }
    br_param_report();
}

void br_log_init(void)
{
    pthread_once(&log_once, log_load);
}

void br_log_set_rank(int rank)
{
    log_rank = rank;
}

const char *br_log_last_error(void)
{
    if (thread_last_error[0] != '\0') {
        return thread_last_error;
    }
    return process_last_error;
}

void br_log_clear_last_error(void)
{
    thread_last_error[0] = '\0';
}

void br_log_set_last_error(const char *msg)
{
    snprintf(thread_last_error, sizeof(thread_last_error), "%s", msg);
}

static void log_vwrite(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                       const char *fmt, va_list ap)
{
    int saved_errno = errno;
    char msg[2048];
    const char *tag;
    int cur;

    /* log_load itself writes lines once the level is set, so only a caller that runs
     * before the settings are loaded takes the pthread_once path. */
    if (atomic_load_explicit(&br_log_level, memory_order_acquire) < 0) {
        br_log_init();
    }
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (level == NCCL_LOG_WARN) {
        snprintf(thread_last_error, sizeof(thread_last_error), "%s", msg);
        pthread_mutex_lock(&log_lock);
        snprintf(process_last_error, sizeof(process_last_error), "%s", msg);
        pthread_mutex_unlock(&log_lock);
    }
    cur = atomic_load_explicit(&br_log_level, memory_order_relaxed);
    if ((int)level > cur ||
        (level != NCCL_LOG_WARN && level != NCCL_LOG_VERSION &&
         (flags & atomic_load_explicit(&br_log_mask, memory_order_relaxed)) == 0)) {
        errno = saved_errno;
        return;
    }
    switch (level) {
    case NCCL_LOG_WARN: tag = "WARN"; break;
    case NCCL_LOG_TRACE: tag = "TRACE"; break;
    case NCCL_LOG_ABORT: tag = "ABORT"; break;
    default: tag = "INFO"; break;
    }
    char rank[16] = "";
    if (log_rank >= 0) {
        snprintf(rank, sizeof(rank), " [%d]", log_rank);
    }
    long tid = (long)syscall(SYS_gettid);
    pthread_mutex_lock(&log_lock);
    if (level == NCCL_LOG_VERSION) {
        fprintf(log_file, "%s\n", msg);
    } else if (level == NCCL_LOG_WARN) {
        const char *base = strrchr(file, '/');
        fprintf(log_file, "%s:%d:%ld%s %s:%d NCCL WARN %s\n", host_name, (int)getpid(), tid, rank,
                base != NULL ? base + 1 : file, line, msg);
    } else {
        fprintf(log_file, "%s:%d:%ld%s NCCL %s %s\n", host_name, (int)getpid(), tid, rank, tag,
                msg);
    }
    fflush(log_file);
    pthread_mutex_unlock(&log_lock);
    errno = saved_errno;
}

void br_log_write(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, flags, file, line, fmt, ap);
    va_end(ap);
}

void br_log_plugin(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...)
{
    va_list ap;
    if (level != NCCL_LOG_WARN && !br_log_enabled(level, flags)) {
        return;
    }
    va_start(ap, fmt);
    log_vwrite(level, flags, file, line, fmt, ap);
    va_end(ap);
}

uint64_t br_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t br_time_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t br_hash_bytes(const void *data, size_t size, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < size; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

const char *br_host_name(void)
{
    br_log_init();
    return host_name;
}

uint64_t br_machine_hash(void)
{
    char buf[512];
    size_t n = (size_t)snprintf(buf, sizeof(buf), "%s", br_host_name());
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        n += fread(buf + n, 1, sizeof(buf) - n - 1, f);
        fclose(f);
    }
    return br_hash_bytes(buf, n, 0);
}

uint64_t br_host_hash(void)
{
    const char *id = BR_PARAM_STR(HOSTID);
    if (id != NULL) {
        return br_hash_bytes(id, strlen(id), 0);
    }
    return br_machine_hash();
}

uint64_t br_pid_ns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

int br_proc_gone(int pid)
{
    char path[64], stat[256];
    ssize_t len;
    int fd;

    if (pid <= 0) {
        return 0;
    }
    if (kill((pid_t)pid, 0) != 0) {
        return errno == ESRCH;
    }
    /* kill() found it: alive or a zombie. Only a /proc of our own pid namespace tells
     * which (none mounted, or another namespace's, as after unshare --pid without
     * --mount-proc: its /proc/<pid> is another process or none, a false "gone"). */
    len = readlink("/proc/self", stat, sizeof(stat) - 1);
    if (len <= 0) {
        return 0;
    }
    stat[len] = '\0';
    if (strtol(stat, NULL, 10) != (long)getpid()) {
        return 0;
    }
    /* "pid (comm) S ...": the state follows the last ')'. */
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        /* It exited since kill() looked, or cannot be read: ask kill() again. */
        return errno == ENOENT && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    }
    len = read(fd, stat, sizeof(stat) - 1);
    close(fd);
    if (len <= 0) {
        return 0;
    }
    stat[len] = '\0';
    const char *end = strrchr(stat, ')');
    if (end == NULL || end[1] != ' ' || (end[2] != 'Z' && end[2] != 'X')) {
        return 0;
    }
    /* A zombie leader is a live process still when other threads of it run (its main
     * thread called pthread_exit): it has tasks besides its own. */
    snprintf(path, sizeof(path), "/proc/%d/task", pid);
    DIR *dir = opendir(path);
    int tasks = 0;
    for (struct dirent *e; dir != NULL && (e = readdir(dir)) != NULL;) {
        tasks += e->d_name[0] != '.';
    }
    if (dir != NULL) {
        closedir(dir);
    }
    return tasks <= 1;
}

uint64_t br_pid_hash(void)
{
    pid_t pid = getpid();
    return br_hash_bytes(&pid, sizeof(pid), br_pid_ns());
}

uint64_t br_shm_key(uint64_t *dev_p)
{
    struct stat st;
    int known = stat("/dev/shm", &st) == 0;
    /* A tmpfs mounted apart (a container's own /dev/shm) is another device: device numbers
     * of mounts without a disk are unique on the running kernel, so together with the
     * machine they tell one /dev/shm from another; the inode tells apart directories of
     * one file system bound there. */
    uint64_t key[4] = {br_host_hash(), br_machine_hash(), known ? (uint64_t)st.st_dev : 0,
                       known ? (uint64_t)st.st_ino : 0};
    if (dev_p != NULL) {
        *dev_p = key[2];
    }
    return br_hash_bytes(key, sizeof(key), 0);
}

ncclResult_t br_calloc_impl(void **ptr_p, size_t n, size_t size, const char *what)
{
    void *p = calloc(n == 0 ? 1 : n, size);
    if (p == NULL) {
        BR_WARN(NCCL_ALLOC, "out of memory allocating %zu bytes for %s", n * size, what);
        return ncclSystemError;
    }
    *ptr_p = p;
    return ncclSuccess;
}

ncclResult_t br_random_bytes(void *buf, size_t size)
{
    ncclResult_t res = ncclSuccess;
    int fd = -1;
    size_t got = 0;

    BR_SYS_GOTO(fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC), res, out);
    while (got < size) {
        ssize_t n;
        BR_SYS_GOTO(n = read(fd, (char *)buf + got, size - got), res, out);
        if (n == 0) {
            BR_WARN(NCCL_INIT, "short read from /dev/urandom");
            res = ncclSystemError;
            goto out;
        }
        got += (size_t)n;
    }
out:
    if (fd >= 0) {
        close(fd);
    }
    return res;
}
