/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The emulated driver's timeline (tests/cuda-emu; what it emulates: fake_cuda.c's
 * comment): streams as worker threads running their operations in order, the hardware
 * queues they share, kernels whose blocks run as CPU threads as room on the device allows,
 * the context's synchronisation with its hang report, and the synchronous copies and
 * memsets that land later on the legacy stream with the race report of their pages.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda_int.h"

/* ---- streams ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int env_int(const char *key, int def, int lo, int hi)
{
    const char *e = getenv(key);
    int v = e != NULL && *e != '\0' ? atoi(e) : def;
    return v < lo ? lo : v > hi ? hi : v;
}

/* Hardware queues: per device, CUDA_DEVICE_MAX_CONNECTIONS of them. An operation starts
 * only once every operation given to its queue before it has started (`dispatched`). */
#define MAX_QUEUES 32
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t issued, dispatched;
} hwq_t;
static hwq_t hwqs[8][MAX_QUEUES];
static int nqueues, queue_rr[8];
static pthread_once_t hwq_once = PTHREAD_ONCE_INIT;

static void hwq_init(void)
{
    nqueues = env_int("CUDA_DEVICE_MAX_CONNECTIONS", 8, 1, MAX_QUEUES);
    for (int d = 0; d < 8; d++) {
        for (int q = 0; q < MAX_QUEUES; q++) {
            pthread_mutex_init(&hwqs[d][q].mu, NULL);
            pthread_cond_init(&hwqs[d][q].cv, NULL);
        }
    }
}

static hwq_t *queue_of(const stream_t *s)
{
    return &hwqs[s->dev][s->hwq];
}

/* Wait for o's turn in its stream's queue. */
static void queue_turn(stream_t *s, const op_t *o)
{
    hwq_t *q = queue_of(s);
    pthread_mutex_lock(&q->mu);
    s->in_turn = 1;
    while (q->dispatched + 1 < o->qseq) {
        pthread_cond_wait(&q->cv, &q->mu);
    }
    s->in_turn = 0;
    pthread_mutex_unlock(&q->mu);
}

/* o has started: the queue goes on to its next operation. */
static void queue_dispatched(stream_t *s, const op_t *o)
{
    hwq_t *q = queue_of(s);
    pthread_mutex_lock(&q->mu);
    if (o->qseq > q->dispatched) {
        q->dispatched = o->qseq;
    }
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Blocks resident at once per device: SMs x 2 (cuDeviceGetAttribute and the occupancy
 * call say the same). */
static pthread_mutex_t sm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sm_cv = PTHREAD_COND_INITIALIZER;
static int sm_used[8];

/* Take room for n blocks of a kernel on dev. `started` of its blocks already run: a kernel
 * partly resident whose next block waits BRAID_FAKE_CUDA_HANG_TIMEOUT seconds for room is
 * reported as the hang it is on a GPU (its blocks spin for blocks that cannot start, and
 * whatever holds the room may be doing the same), and the process aborts. */
static void blocks_take(int dev, int n, unsigned started, unsigned nblocks)
{
    const uint64_t limit = (uint64_t)env_int("BRAID_FAKE_CUDA_HANG_TIMEOUT", 15, 1, 3600);
    const uint64_t since = now_ns();
    pthread_mutex_lock(&sm_mu);
    while (sm_used[dev] + n > DEVICE_BLOCKS) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&sm_cv, &sm_mu, &ts);
        if (started > 0 && sm_used[dev] + n > DEVICE_BLOCKS &&
            now_ns() - since > limit * 1000000000ull) {
            fprintf(stderr,
                    "fake_cuda: HANG: a kernel of %u blocks has %u resident on device %d and its "
                    "next block has waited %llu s for room (the device holds %d, all taken): a "
                    "launch that is not cooperative, whose resident blocks spin for the others, "
                    "beside kernels that hold the room\n",
                    nblocks, started, dev, (unsigned long long)limit, DEVICE_BLOCKS);
            abort();
        }
    }
    sm_used[dev] += n;
    pthread_mutex_unlock(&sm_mu);
}

static void blocks_give(int dev, int n)
{
    pthread_mutex_lock(&sm_mu);
    sm_used[dev] -= n;
    pthread_cond_broadcast(&sm_cv);
    pthread_mutex_unlock(&sm_mu);
}

/* Fault injection, by environment variables that list ranks (comma-separated): is block b
 * of a FIFO kernel one of the ranks listed in `key`? *count: how many ranks it lists. */
static int rank_listed(const char *key, const br_dev_launch_t *L, unsigned b, int *count)
{
    const char *e = getenv(key);
    int listed = 0, n = 0;
    for (const char *p = e != NULL ? e : ""; *p != '\0'; n++) {
        char *end = NULL;
        long r = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "fake_cuda: %s='%s' is not a list of ranks\n", key, e);
            abort();
        }
        listed |= r == L->blocks[b].rank;
        p = *end == ',' ? end + 1 : end;
    }
    if (count != NULL) {
        *count = n;
    }
    return listed;
}

/* BRAID_FAKE_CUDA_BAD_RANKS: the first work item of these ranks' blocks has a kind the
 * kernel does not know, and each such block starts only once one block of every listed
 * rank has (at most 5 s), so that kernels on several devices fail in the same instant.
 * Returns the launch the block runs: L, or a copy of it over corrupted work items (which
 * *copy then holds, for the caller to free). */
_Static_assert(sizeof(br_dev_launch_t) <= 128, "the corrupted launch's copy has 128 bytes");
static pthread_mutex_t bad_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bad_cv = PTHREAD_COND_INITIALIZER;
static int bad_arrived;

static const br_dev_launch_t *bad_launch(const br_dev_launch_t *L, unsigned b, unsigned nblocks,
                                         void **copy)
{
    int nlisted = 0;
    *copy = NULL;
    if (!rank_listed("BRAID_FAKE_CUDA_BAD_RANKS", L, b, &nlisted) || L->blocks[b].nworks == 0) {
        return L;
    }
    uint32_t nworks = 0;
    for (unsigned i = 0; i < nblocks; i++) {
        uint32_t end = L->blocks[i].first + L->blocks[i].nworks;
        nworks = end > nworks ? end : nworks;
    }
    size_t wb = ((size_t)nworks * sizeof(br_dev_work_t) + 127) / 128 * 128;
    char *c = aligned_alloc(128, 128 + wb);
    if (c == NULL) {
        fprintf(stderr, "fake_cuda: out of memory for BRAID_FAKE_CUDA_BAD_RANKS\n");
        abort();
    }
    br_dev_launch_t *bl = (br_dev_launch_t *)(void *)c;
    br_dev_work_t *w = (br_dev_work_t *)(void *)(c + 128);
    *bl = *L;
    memcpy(w, L->works, (size_t)nworks * sizeof(*w));
    w[L->blocks[b].first].kind = 0; /* no kind of BR_DEV_WORK_* */
    bl->works = w;
    *copy = c;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&bad_mu);
    bad_arrived++;
    pthread_cond_broadcast(&bad_cv);
    while (bad_arrived % nlisted != 0 && pthread_cond_timedwait(&bad_cv, &bad_mu, &until) == 0) {
    }
    pthread_mutex_unlock(&bad_mu);
    return bl;
}

typedef struct {
    const br_dev_launch_t *L;
    int b, dev, give; /* give: the block returns its room when it ends */
    unsigned nblocks; /* of the launch */
} block_arg_t;

/* Threads per block (BRAID_FAKE_CUDA_BLOCK_THREADS, 2 unless set, at most 8): they share
 * the block's state and barrier as a CUDA block's threads do, so the interpreter's split
 * between thread 0 (polls, plans, counters) and the others (data) runs concurrently. */
static int block_threads(void)
{
    return env_int("BRAID_FAKE_CUDA_BLOCK_THREADS", 2, 1, 8);
}

typedef struct {
    const br_dev_launch_t *L;
    br_dev_shared_t *sh;
    pthread_barrier_t *barrier;
    int b, tid, nthr;
} block_thread_t;

static void *block_thread(void *p)
{
    block_thread_t *t = p;
    br_dev_emu_enter(t->tid, t->nthr, t->nthr > 1 ? t->barrier : NULL);
    br_dev_run_block_with(t->L, t->b, t->sh);
    return NULL;
}

static void *block_main(void *p)
{
    block_arg_t *a = p;
    const int nthr = block_threads();
    void *bad_copy = NULL;
    const br_dev_launch_t *L = bad_launch(a->L, (unsigned)a->b, a->nblocks, &bad_copy);
    br_dev_shared_t *sh = aligned_alloc(16, (sizeof(*sh) + 15) / 16 * 16);
    pthread_barrier_t barrier;
    pthread_t th[8];
    block_thread_t t[8];
    if (sh == NULL || pthread_barrier_init(&barrier, NULL, (unsigned)nthr) != 0) {
        fprintf(stderr, "fake_cuda: out of memory for a block\n");
        abort();
    }
    for (int i = 0; i < nthr; i++) {
        t[i] = (block_thread_t){L, sh, &barrier, a->b, i, nthr};
        if (i > 0 && pthread_create(&th[i], NULL, block_thread, &t[i]) != 0) {
            fprintf(stderr, "fake_cuda: cannot start a block's thread\n");
            abort();
        }
    }
    block_thread(&t[0]);
    for (int i = 1; i < nthr; i++) {
        pthread_join(th[i], NULL);
    }
    pthread_barrier_destroy(&barrier);
    free(sh);
    free(bad_copy);
    if (a->give) {
        blocks_give(a->dev, 1);
    }
    return NULL;
}

static uint64_t value_load(const op_t *o)
{
    return o->wide ? __atomic_load_n((volatile uint64_t *)o->addr, __ATOMIC_ACQUIRE)
                   : __atomic_load_n((volatile uint32_t *)o->addr, __ATOMIC_ACQUIRE);
}

/* CUDA's GEQ is cyclic: (int32_t)(*addr - value) >= 0, int64_t for the 64-bit form. */
static int value_reached(const op_t *o)
{
    uint64_t v = value_load(o);
    return o->wide ? (int64_t)(v - o->value) >= 0
                   : (int32_t)((uint32_t)v - (uint32_t)o->value) >= 0;
}

static stream_t *legacy_stream(void);
static void land(op_t *o);

/* A kernel of the interpreter: every block its own thread, started as room on the device
 * allows (a cooperative launch takes room for all of them at once); the queue goes on once
 * every block has started. The blocks of ranks listed in BRAID_FAKE_CUDA_STALL_RANKS (fault
 * injection) start only once the launch's other blocks have ended, as blocks that stopped
 * making progress look to their peers. */
static void run_kernel(stream_t *s, op_t *o)
{
    pthread_t *th = calloc(o->nblocks, sizeof(*th));
    block_arg_t *args = calloc(o->nblocks, sizeof(*args));
    char *stalled = calloc(o->nblocks, 1);
    /* The block scheduler dispatches a plain launch's blocks one at a time
     * (BRAID_FAKE_CUDA_DISPATCH_US apart, 1000), so that two kernels launched together
     * interleave; a cooperative launch takes room for all of its blocks at once. */
    const int dispatch_us = env_int("BRAID_FAKE_CUDA_DISPATCH_US", 1000, 0, 1000000);
    if (o->cooperative) {
        blocks_take(s->dev, (int)o->nblocks, 0, o->nblocks);
    }
    for (unsigned b = 0; b < o->nblocks; b++) {
        if (!o->cooperative) {
            if (b > 0 && dispatch_us > 0) {
                usleep((useconds_t)dispatch_us);
            }
            blocks_take(s->dev, 1, b, o->nblocks);
        }
        args[b] = (block_arg_t){&o->launch, (int)b, s->dev, !o->cooperative, o->nblocks};
        stalled[b] = (char)rank_listed("BRAID_FAKE_CUDA_STALL_RANKS", &o->launch, b, NULL);
        if (!stalled[b]) {
            pthread_create(&th[b], NULL, block_main, &args[b]);
        }
    }
    queue_dispatched(s, o);
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned b = 0; b < o->nblocks; b++) {
            if (pass == 1 && stalled[b]) {
                pthread_create(&th[b], NULL, block_main, &args[b]);
            }
        }
        for (unsigned b = 0; b < o->nblocks; b++) {
            if (stalled[b] == pass) {
                pthread_join(th[b], NULL);
            }
        }
    }
    if (o->cooperative) {
        blocks_give(s->dev, (int)o->nblocks);
    }
    free(th);
    free(args);
    free(stalled);
}

/* A kernel that waits for nothing (direct, reduce): every thread of every block of its
 * grid in turn on this stream's thread, each with its own block and thread index, so that
 * the grid-stride indexing runs as launched and a piece left out or done twice shows. */
static void run_grid(const op_t *o)
{
    const int nthr = block_threads();
    for (unsigned b = 0; b < o->nblocks; b++) {
        for (int t = 0; t < nthr; t++) {
            if (o->kind == OP_REDUCE) {
                br_dev_emu_enter(t, nthr, NULL);
                br_dev_reduce_n(&o->reduce, (int)b, (int)o->nblocks);
            } else { /* its vector paths are C++ (fake_cuda_direct.cc) */
                fake_direct_run(&o->direct_args, (int)b, (int)o->nblocks, t, nthr);
            }
        }
    }
    br_dev_emu_enter(0, 1, NULL);
}

static void run_op(stream_t *s, op_t *o)
{
    int waits = o->kind == OP_WAIT_EVENT || o->kind == OP_WAIT_VALUE || o->kind == OP_WAIT_LEGACY;
    if (!waits && o->kind != OP_KERNEL) {
        queue_dispatched(s, o);
    }
    switch (o->kind) {
    case OP_RECORD:
        pthread_mutex_lock(&o->ev->mu);
        if (o->gen > o->ev->completed) {
            o->ev->completed = o->gen;
        }
        pthread_cond_broadcast(&o->ev->cv);
        pthread_mutex_unlock(&o->ev->mu);
        break;
    case OP_WAIT_EVENT: event_wait_gen(o->ev, o->gen); break;
    case OP_WAIT_VALUE:
        while (!value_reached(o)) {
            usleep(20);
        }
        break;
    case OP_WAIT_LEGACY: {
        stream_t *l = legacy_stream();
        pthread_mutex_lock(&l->mu);
        while (l->completed < o->value) {
            pthread_cond_wait(&l->cv, &l->mu);
        }
        pthread_mutex_unlock(&l->mu);
        break;
    }
    case OP_WRITE_VALUE:
        if (o->wide) {
            __atomic_store_n((volatile uint64_t *)o->addr, o->value, __ATOMIC_RELEASE);
        } else {
            __atomic_store_n((volatile uint32_t *)o->addr, (uint32_t)o->value, __ATOMIC_RELEASE);
        }
        break;
    case OP_REDUCE: run_grid(o); break;
    case OP_COPY: memmove(o->dst, o->src, o->n); break;
    case OP_SET: memset(o->dst, o->byte, o->n); break;
    case OP_LAND: land(o); break;
    case OP_KERNEL:
        if (o->direct) {
            queue_dispatched(s, o);
            run_grid(o);
        } else {
            run_kernel(s, o);
        }
        break;
    }
    if (waits) {
        queue_dispatched(s, o);
    }
}

/* BRAID_FAKE_CUDA_EXCLUSIVE: the process holds the GPU while any of its streams has work. */
static pthread_mutex_t gpu_mu = PTHREAD_MUTEX_INITIALIZER;
static int gpu_fd = -2, gpu_holders;

static void gpu_take(void)
{
    pthread_mutex_lock(&gpu_mu);
    if (gpu_fd == -2) {
        const char *path = getenv("BRAID_FAKE_CUDA_EXCLUSIVE");
        gpu_fd = path != NULL && *path != '\0' ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)
                                               : -1;
    }
    if (gpu_fd >= 0 && gpu_holders++ == 0) {
        while (flock(gpu_fd, LOCK_EX) != 0) {
        }
    }
    pthread_mutex_unlock(&gpu_mu);
}

static void gpu_give(void)
{
    pthread_mutex_lock(&gpu_mu);
    if (gpu_fd >= 0 && --gpu_holders == 0) {
        flock(gpu_fd, LOCK_UN);
    }
    pthread_mutex_unlock(&gpu_mu);
}

static void *stream_main(void *p)
{
    stream_t *s = p;
    int holding = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->head == NULL && !s->stop) {
            pthread_cond_wait(&s->cv, &s->mu);
        }
        if (s->head == NULL) {
            break;
        }
        op_t *o = s->head;
        s->busy = 1;
        s->head_since_ns = now_ns();
        pthread_mutex_unlock(&s->mu);
        if (!holding) {
            gpu_take();
            holding = 1;
        }
        queue_turn(s, o);
        run_op(s, o);
        pthread_mutex_lock(&s->mu);
        s->head = o->next;
        if (s->head == NULL) {
            s->tail = NULL;
            gpu_give();
            holding = 0;
        }
        s->busy = 0;
        s->completed++;
        free(o);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Every stream made (its slot NULL once destroyed), so that a capture's end and the
 * context's synchronisation reach them. */
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static stream_t *all_streams[256];
static int nstreams_seen;

void streams_end_capture(void)
{
    pthread_mutex_lock(&streams_mu);
    for (int i = 0; i < nstreams_seen; i++) {
        if (all_streams[i] != NULL) {
            all_streams[i]->capturing = 0;
        }
    }
    pthread_mutex_unlock(&streams_mu);
}

stream_t *stream_new(int blocking, int legacy)
{
    stream_t *s = calloc(1, sizeof(*s));
    pthread_once(&hwq_once, hwq_init);
    s->dev = ctx_device();
    s->blocking = blocking;
    s->legacy = legacy;
    pthread_mutex_lock(&streams_mu);
    s->hwq = queue_rr[s->dev]++ % nqueues;
    s->id = nstreams_seen;
    if (nstreams_seen < 256) {
        all_streams[nstreams_seen++] = s;
    }
    pthread_mutex_unlock(&streams_mu);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_create(&s->worker, NULL, stream_main, s);
    return s;
}

/* The legacy default stream (NULL). */
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;
static stream_t *legacy;

static void legacy_make(void)
{
    legacy = stream_new(1, 1);
}

static stream_t *legacy_stream(void)
{
    pthread_once(&legacy_once, legacy_make);
    return legacy;
}

/* The special handles of cuda.h: CU_STREAM_LEGACY (0x1) is the legacy default stream, as
 * NULL is; CU_STREAM_PER_THREAD (0x2) is the calling thread's own default stream, ordered
 * after the legacy stream's earlier work like a blocking stream. A handle 0x2 used by
 * another thread is that thread's stream, as on a GPU. */
static _Thread_local stream_t *per_thread;

stream_t *stream_of(void *h)
{
    if (h == NULL || h == (void *)1) {
        return legacy_stream();
    }
    if (h == (void *)2) {
        if (per_thread == NULL) {
            per_thread = stream_new(1, 0);
        }
        return per_thread;
    }
    return h;
}

static void append(stream_t *s, op_t *o)
{
    hwq_t *q = queue_of(s);
    o->next = NULL;
    pthread_mutex_lock(&q->mu);
    o->qseq = ++q->issued;
    pthread_mutex_unlock(&q->mu);
    if (s->tail != NULL) {
        s->tail->next = o;
    } else {
        s->head = o;
    }
    s->tail = o;
    s->pushed++;
}

void push(void *h, op_t *o)
{
    stream_t *s = stream_of(h);
    if (s->capturing) {
        capture_append(o);
        return;
    }
    /* A blocking stream's work is ordered after the legacy stream's earlier work. */
    uint64_t legacy_pushed = 0;
    if (s->blocking && !s->legacy) {
        stream_t *l = legacy_stream();
        pthread_mutex_lock(&l->mu);
        legacy_pushed = l->pushed > l->completed ? l->pushed : 0;
        pthread_mutex_unlock(&l->mu);
    }
    pthread_mutex_lock(&s->mu);
    if (legacy_pushed > 0) {
        op_t *w = op_new(OP_WAIT_LEGACY);
        w->value = legacy_pushed;
        append(s, w);
    }
    append(s, o);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

op_t *op_new(op_kind_t k)
{
    op_t *o = calloc(1, sizeof(*o));
    o->kind = k;
    return o;
}

/* ---- the context's synchronisation ---- */

/* What stream s is stuck on, for the report. Caller holds s->mu. */
static void describe_head(const stream_t *s, char *buf, size_t len)
{
    const op_t *o = s->head;
    if (s->in_turn) {
        snprintf(buf, len,
                 "waits for its turn in hardware queue %d of %d (CUDA_DEVICE_MAX_CONNECTIONS), "
                 "behind another stream's operation that waits",
                 s->hwq, nqueues);
        return;
    }
    switch (o->kind) {
    case OP_WAIT_VALUE:
        snprintf(buf, len, "waits until the %d-bit word at %p reaches %llu (it holds %llu)",
                 o->wide ? 64 : 32, (void *)o->addr, (unsigned long long)o->value,
                 (unsigned long long)value_load(o));
        break;
    case OP_WAIT_EVENT: snprintf(buf, len, "waits for an event that was not reached"); break;
    case OP_WAIT_LEGACY: snprintf(buf, len, "waits for the legacy stream"); break;
    case OP_KERNEL: snprintf(buf, len, "runs a kernel that does not finish"); break;
    default: snprintf(buf, len, "runs operation %d", (int)o->kind); break;
    }
}

void ctx_sync(const char *call)
{
    int dev = ctx_device();
    int limit = env_int("BRAID_FAKE_CUDA_HANG_TIMEOUT", 15, 1, 3600);
    pthread_once(&hwq_once, hwq_init);
    for (;;) {
        stream_t *stuck = NULL;
        int busy = 0;
        pthread_mutex_lock(&streams_mu);
        for (int i = 0; i < nstreams_seen; i++) {
            stream_t *s = all_streams[i];
            if (s == NULL || s->dev != dev) {
                continue;
            }
            pthread_mutex_lock(&s->mu);
            uint64_t now = now_ns();
            if (s->head != NULL) {
                /* Stuck: waiting (in the stream or for its queue) without moving. A kernel
                 * that runs long is not: its own waits time out. */
                const op_t *o = s->head;
                int waiting = s->in_turn || o->kind == OP_WAIT_VALUE ||
                              o->kind == OP_WAIT_EVENT || o->kind == OP_WAIT_LEGACY;
                busy = 1;
                if (waiting && s->busy && s->head_since_ns < now &&
                    now - s->head_since_ns > (uint64_t)limit * 1000000000ull) {
                    stuck = s;
                }
            }
            pthread_mutex_unlock(&s->mu);
            if (stuck != NULL) {
                break;
            }
        }
        pthread_mutex_unlock(&streams_mu);
        if (!busy) {
            return;
        }
        if (stuck != NULL) {
            char what[256];
            pthread_mutex_lock(&stuck->mu);
            describe_head(stuck, what, sizeof(what));
            pthread_mutex_unlock(&stuck->mu);
            fprintf(stderr,
                    "fake_cuda: HANG: %s synchronises the context (CUDA's rule), but stream %d "
                    "has not moved for %d s: it %s. On a GPU this call never returns.\n",
                    call, stuck->id, limit, what);
            abort();
        }
        usleep(200);
    }
}

EXPORT CUresult cuCtxSynchronize(void)
{
    ctx_sync("cuCtxSynchronize");
    return OK;
}

/* ---- bytes that land later ---- */

/* Pending landings of the synchronous memset and copy: their pages are inaccessible until
 * the legacy stream lands them, so that anything touching them first faults, and the fault
 * is reported as the race it is. Read by the signal handler: plain words, no lock. */
#define MAX_LANDINGS 256
typedef struct {
    volatile uintptr_t lo, hi; /* pages; hi 0: free */
    const char *call;
    uint64_t issued_ns;
} landing_t;
static landing_t landings[MAX_LANDINGS];
static pthread_mutex_t land_mu = PTHREAD_MUTEX_INITIALIZER;

static void protect_pending(void)
{
    for (int i = 0; i < MAX_LANDINGS; i++) {
        if (landings[i].hi != 0) {
            mprotect((void *)landings[i].lo, landings[i].hi - landings[i].lo, PROT_NONE);
        }
    }
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    (void)uc;
    for (int i = 0; i < MAX_LANDINGS; i++) {
        if (landings[i].hi != 0 && a >= landings[i].lo && a < landings[i].hi) {
            char msg[512];
            int n = snprintf(msg, sizeof(msg),
                             "fake_cuda: RACE: %p was touched by work that is not ordered after "
                             "the legacy stream, before the %s issued %llu us earlier had "
                             "landed there (the synchronous copy and memset return before "
                             "their bytes land, and non-blocking streams do not wait for "
                             "them). On a GPU it reads the old bytes.\n",
                             (void *)a, landings[i].call,
                             (unsigned long long)((now_ns() - landings[i].issued_ns) / 1000));
            if (write(2, msg, (size_t)n) < 0) {
                /* nothing more to say */
            }
            abort();
        }
    }
    signal(sig, SIG_DFL); /* not ours: the default action, on return */
}

__attribute__((constructor)) static void fake_cuda_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
}

void land_later(const char *call, uintptr_t dst, const void *src, unsigned char byte, size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    op_t *o = op_new(OP_LAND);
    o->dst = (void *)dst;
    o->n = n;
    o->byte = byte;
    if (src != NULL) {
        o->land_tmp = malloc(n ? n : 1); /* the pageable buffer, staged */
        memcpy(o->land_tmp, src, n);
    }
    o->land_slot = -1;
    pthread_mutex_lock(&land_mu);
    for (int i = 0; i < MAX_LANDINGS && n > 0; i++) {
        if (landings[i].hi == 0) {
            landings[i].call = call;
            landings[i].issued_ns = now_ns();
            landings[i].lo = dst / (uintptr_t)page * (uintptr_t)page;
            landings[i].hi = (dst + n + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
            o->land_slot = i;
            break;
        }
    }
    protect_pending();
    pthread_mutex_unlock(&land_mu);
    push(NULL, o);
}

static void land(op_t *o)
{
    usleep((useconds_t)env_int("BRAID_FAKE_CUDA_DMA_US", 20000, 0, 10000000));
    pthread_mutex_lock(&land_mu);
    if (o->land_slot >= 0) {
        landing_t *l = &landings[o->land_slot];
        mprotect((void *)l->lo, l->hi - l->lo, PROT_READ | PROT_WRITE);
        l->hi = 0;
    }
    if (o->land_tmp != NULL) {
        memcpy(o->dst, o->land_tmp, o->n);
    } else {
        memset(o->dst, o->byte, o->n);
    }
    protect_pending(); /* landings sharing a page with this one */
    pthread_mutex_unlock(&land_mu);
    free(o->land_tmp);
}


void stream_destroy(stream_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->worker, NULL);
    pthread_mutex_lock(&streams_mu);
    for (int i = 0; i < nstreams_seen; i++) {
        if (all_streams[i] == s) {
            all_streams[i] = NULL;
        }
    }
    pthread_mutex_unlock(&streams_mu);
    free(s);
}
