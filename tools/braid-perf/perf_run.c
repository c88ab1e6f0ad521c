/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-perf: one rank's benchmark. For every type, operator and size it times the
 * out-of-place and then the in-place call (warm-up, a barrier, then `iters` calls back to
 * back with no synchronisation between them), checks `check` fresh inputs of each, and
 * combines time and wrong-element counts across ranks. Rank 0 prints nccl-tests' table.
 *
 * Every rank runs this in its own thread; buffers, stream and staging copies are per rank.
 */
#include "perf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Buffers of one rank: the ones handed to NCCL and their host mirrors (the same memory
 * with host buffers; staging copies with device buffers). */
struct perf_bufs {
    char *send, *recv;           /* given to NCCL */
    char *host_send, *host_recv; /* where inputs are written and outputs checked */
    size_t bytes;                /* of each buffer */
    cudaStream_t stream;
};

/* One printed line's numbers, kept by rank 0 for the JSON file. */
struct perf_row {
    size_t size, count;
    int type, op, root;
    double time_us[2], algbw[2], busbw[2];
    long wrong[2]; /* -1: not checked */
};

/* Rank 0's running totals. */
struct perf_totals {
    double bw_sum;
    int bw_count;
    long wrong;
    struct perf_row *rows;
    size_t nrows, cap;
};

void perf_fatal(const struct perf_rank *r, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "braid-perf: rank %d: ", r != NULL ? r->rank : -1);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    /* Peers are likely blocked inside a collective with this rank: leave at once and let
     * the launcher (fork parent or mpirun) stop them. */
    _exit(2);
}

/* A failed call ends the run: `what` names it in the message. */
#define PERF_NCCL(r, what, call)                                                                   \
    do {                                                                                           \
        ncclResult_t res_ = (call);                                                                \
        if (res_ != ncclSuccess) {                                                                 \
            perf_fatal((r), "%s failed: %s (%s)", (what), ncclGetErrorString(res_),                \
                       ncclGetLastError((r)->comm));                                               \
        }                                                                                          \
    } while (0)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* One timed step: `agg` calls, grouped when more than one (nccl-tests' -m). */
static void launch_step(const struct perf_rank *r, const void *send, void *recv, size_t count,
                        int type, int op, cudaStream_t stream)
{
    int agg = r->opts->agg;
    if (agg > 1) {
        PERF_NCCL(r, "ncclGroupStart", ncclGroupStart());
    }
    for (int a = 0; a < agg; a++) {
        PERF_NCCL(r, perf_coll_info(r->opts->coll)->name,
                  perf_coll_launch(r->opts->coll, r, send, recv, count, (ncclDataType_t)type,
                                   (ncclRedOp_t)(op < 0 ? ncclSum : op), stream));
    }
    if (agg > 1) {
        PERF_NCCL(r, "ncclGroupEnd", ncclGroupEnd());
    }
}

/* Mean time of one call, in microseconds, on this rank. */
static double time_coll(const struct perf_rank *r, struct perf_bufs *b, size_t count, int type,
                        int op, int in_place)
{
    const struct perf_opts *o = r->opts;
    void *send, *recv;
    double t0;
    perf_coll_buffers(o->coll, r, count, perf_type_get(type)->size, in_place, b->send, b->recv,
                      &send, &recv);
    for (int w = 0; w < o->warmup; w++) {
        launch_step(r, send, recv, count, type, op, b->stream);
    }
    if (perf_mem_stream_sync(o->device, b->stream) != 0) {
        perf_fatal(r, "warm-up failed");
    }
    /* Start together; after this, no synchronisation until the last call returns. */
    perf_sync_barrier(r->sync, r->local);
    t0 = now_us();
    for (int it = 0; it < o->iters; it++) {
        launch_step(r, send, recv, count, type, op, b->stream);
    }
    if (perf_mem_stream_sync(o->device, b->stream) != 0) {
        perf_fatal(r, "timed calls failed");
    }
    return (now_us() - t0) / ((double)o->iters * o->agg);
}

/* The seed of one check: the same on every rank, different for every check. */
static uint64_t check_seed(int iter, int in_place, size_t bytes, int type, int op)
{
    uint64_t x = ((uint64_t)bytes << 20) ^ ((uint64_t)(iter + 1) << 8) ^ ((uint64_t)in_place << 7) ^
                 ((uint64_t)type << 3) ^ (uint64_t)(op + 1);
    return x * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
}

/* Wrong elements on this rank over `check` runs with fresh inputs. */
static long check_coll(const struct perf_rank *r, struct perf_bufs *b, size_t count, int type,
                       int op, int in_place)
{
    const struct perf_opts *o = r->opts;
    const struct perf_type *t = perf_type_get(type);
    void *send, *recv, *hsend, *hrecv;
    long wrong = 0;
    size_t send_elems, recv_elems, need;
    /* Only the bytes this size uses are poisoned and copied, not the whole buffers. */
    perf_coll_elems(o->coll, count, r->nranks, &send_elems, &recv_elems);
    need = (send_elems > recv_elems ? send_elems : recv_elems) * t->size;
    perf_coll_buffers(o->coll, r, count, t->size, in_place, b->send, b->recv, &send, &recv);
    perf_coll_buffers(o->coll, r, count, t->size, in_place, b->host_send, b->host_recv, &hsend,
                      &hrecv);
    for (int c = 0; c < o->check; c++) {
        struct perf_gen g;
        perf_gen_init(&g, t, op, r->nranks, check_seed(c, in_place, count * t->size, type, op));
        /* Poison the output, so a result left over from an earlier call cannot pass. */
        memset(b->host_recv, 0xa5, need);
        perf_coll_fill(o->coll, r, &g, count, in_place, b->host_send, b->host_recv);
        perf_mem_to_dev(o->device, b->send, b->host_send, need, b->stream);
        perf_mem_to_dev(o->device, b->recv, b->host_recv, need, b->stream);
        PERF_NCCL(r, perf_coll_info(o->coll)->name,
                  perf_coll_launch(o->coll, r, send, recv, count, (ncclDataType_t)type,
                                   (ncclRedOp_t)(op < 0 ? ncclSum : op), b->stream));
        if (perf_mem_stream_sync(o->device, b->stream) != 0) {
            perf_fatal(r, "checked call failed");
        }
        perf_mem_to_host(o->device, b->host_recv, b->recv, need);
        wrong += (long)perf_coll_check(o->coll, r, &g, count, hrecv);
    }
    return wrong;
}

static void format_time(char *buf, size_t len, double us)
{
    snprintf(buf, len, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
}

static void format_wrong(char *buf, size_t len, long wrong)
{
    if (wrong < 0) {
        snprintf(buf, len, "%6s", "N/A");
    } else {
        snprintf(buf, len, "%6ld", wrong);
    }
}

static void print_row(const struct perf_row *row)
{
    const struct perf_type *t = perf_type_get(row->type);
    printf("%12zu  %12zu  %8s  %6s  %6d", row->size, row->count, t->name, perf_op_name(row->op),
           row->root);
    for (int ip = 0; ip < 2; ip++) {
        char tm[32], wr[32];
        if (row->time_us[ip] < 0) { /* not run (--place) */
            printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
            continue;
        }
        format_time(tm, sizeof(tm), row->time_us[ip]);
        format_wrong(wr, sizeof(wr), row->wrong[ip]);
        printf("  %s  %6.2f  %6.2f  %s", tm, row->algbw[ip], row->busbw[ip], wr);
    }
    printf("\n");
    fflush(stdout);
}

static void keep_row(struct perf_totals *tot, const struct perf_row *row)
{
    if (tot->nrows == tot->cap) {
        size_t cap = tot->cap ? 2 * tot->cap : 64;
        struct perf_row *rows = realloc(tot->rows, cap * sizeof(*rows));
        if (rows == NULL) {
            return; /* the JSON file misses rows; the table is already printed */
        }
        tot->rows = rows;
        tot->cap = cap;
    }
    tot->rows[tot->nrows++] = *row;
}

/* Time, check and report one size; every rank takes part, rank 0 prints. */
static void run_size(const struct perf_rank *r, struct perf_bufs *b, struct perf_totals *tot,
                     size_t bytes, int type, int op)
{
    const struct perf_opts *o = r->opts;
    const struct perf_coll_info *info = perf_coll_info(o->coll);
    const struct perf_type *t = perf_type_get(type);
    size_t count = perf_coll_count(o->coll, bytes, t->size, r->nranks);
    double vals[4];
    int ops[4];
    int time_op = o->avg_mode == 2 ? PERF_RED_MIN : o->avg_mode == 3 ? PERF_RED_MAX : PERF_RED_SUM;
    struct perf_row row = {0};

    for (int ip = 0; ip < 2; ip++) {
        int run = (o->places >> ip) & 1;
        double us = run ? time_coll(r, b, count, type, op, ip) : -1.0;
        int checked = run && o->check > 0 && (ip == 0 || info->check_in_place);
        vals[2 * ip] = (o->avg_mode == 0 && r->rank != 0 && run) ? 0.0 : us;
        vals[2 * ip + 1] = checked ? (double)check_coll(r, b, count, type, op, ip) : -1.0;
        ops[2 * ip] = time_op;
        ops[2 * ip + 1] = checked ? PERF_RED_SUM : PERF_RED_MAX;
    }
    perf_sync_reduce(r->sync, r->local, vals, ops, 4);

    row.count = count;
    row.size = count * t->size * (info->total_size ? (size_t)r->nranks : 1);
    row.type = type;
    row.op = info->has_op ? op : -1;
    row.root = info->has_root ? o->root : -1;
    for (int ip = 0; ip < 2; ip++) {
        double us = vals[2 * ip] / (o->avg_mode == 1 ? r->nranks : 1);
        row.time_us[ip] = us;
        row.wrong[ip] = -1;
        if (us < 0) {
            continue; /* this half was not run */
        }
        row.algbw[ip] = us > 0 ? (double)row.size / (us * 1e-6) / 1e9 : 0.0;
        row.busbw[ip] = row.algbw[ip] * perf_coll_busbw_factor(o->coll, r->nranks);
        row.wrong[ip] = (long)vals[2 * ip + 1];
        tot->bw_sum += row.busbw[ip];
        tot->bw_count++;
        tot->wrong += row.wrong[ip] > 0 ? row.wrong[ip] : 0;
    }
    if (r->rank == 0) {
        print_row(&row);
        keep_row(tot, &row);
    }
}

static void print_header(const struct perf_rank *r, const char *lines)
{
    const struct perf_opts *o = r->opts;
    const struct perf_coll_info *info = perf_coll_info(o->coll);
    int version = 0;
    char step[64];
    ncclGetVersion(&version);
    if (o->step_factor > 1) {
        snprintf(step, sizeof(step), "%g(factor)", o->step_factor);
    } else {
        snprintf(step, sizeof(step), "%zu(bytes)", o->step_bytes);
    }
    printf("# braid-perf %s (nccl-tests: %s) nccl-headers=%d nccl-library=%d\n", info->name,
           info->binary, NCCL_VERSION_CODE, version);
    printf("# nThread %d nGpus 1 minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d "
           "agg iters: %d validation: %d graph: 0\n",
           o->nthreads, o->min_bytes, o->max_bytes, step, o->warmup, o->iters, o->agg,
           o->check > 0);
    printf("#\n# Using devices\n");
    for (int i = 0; i < r->nranks; i++) {
        printf("#  %s\n", lines + (size_t)i * PERF_SLOT_BYTES);
    }
    printf("#\n");
    /* Centre the two captions over their four columns (52 + 2 x 33 characters). */
    printf("#%*s%s%*s%s\n", 61, "", "out-of-place", 21, "", "in-place");
    printf("#%11s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
    for (int ip = 0; ip < 2; ip++) {
        printf("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
    }
    printf("\n#%11s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
    for (int ip = 0; ip < 2; ip++) {
        printf("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
    }
    printf("\n");
    fflush(stdout);
}

static void write_json(const struct perf_rank *r, const struct perf_totals *tot, double avg)
{
    const struct perf_opts *o = r->opts;
    FILE *f = fopen(o->json_path, "w");
    if (f == NULL) {
        perror("braid-perf: -J");
        return;
    }
    fprintf(f, "{\"tool\": \"braid-perf\", \"collective\": \"%s\", \"nranks\": %d, ",
            perf_coll_info(o->coll)->name, r->nranks);
    fprintf(f, "\"memory\": \"%s\", \"iters\": %d, \"warmup\": %d, \"agg\": %d, \"check\": %d,\n",
            o->device ? "device" : "host", o->iters, o->warmup, o->agg, o->check);
    fprintf(f, " \"rows\": [\n");
    for (size_t i = 0; i < tot->nrows; i++) {
        const struct perf_row *row = &tot->rows[i];
        fprintf(f,
                "  {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
                "\"root\": %d",
                row->size, row->count, perf_type_get(row->type)->name, perf_op_name(row->op),
                row->root);
        for (int ip = 0; ip < 2; ip++) {
            const char *k = ip ? "in_place" : "out_of_place";
            if (row->time_us[ip] < 0) {
                continue;
            }
            fprintf(f,
                    ", \"%s\": {\"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, "
                    "\"wrong\": %ld}",
                    k, row->time_us[ip], row->algbw[ip], row->busbw[ip], row->wrong[ip]);
        }
        fprintf(f, "}%s\n", i + 1 < tot->nrows ? "," : "");
    }
    fprintf(f, " ],\n \"avg_busbw\": %.6f, \"wrong\": %ld, \"ok\": %s}\n", avg, tot->wrong,
            tot->wrong == 0 ? "true" : "false");
    fclose(f);
}

static int alloc_bufs(const struct perf_rank *r, struct perf_bufs *b)
{
    const struct perf_opts *o = r->opts;
    memset(b, 0, sizeof(*b));
    /* Every collective's send and receive buffers fit in max_bytes (its size column). */
    b->bytes = o->max_bytes > 0 ? o->max_bytes : 1;
    if (o->memalloc) { /* host memory from the library (a memfd peers may map) */
        void *send = NULL, *recv = NULL;
        if (ncclMemAlloc(&send, b->bytes) != ncclSuccess) {
            return -1;
        }
        if (ncclMemAlloc(&recv, b->bytes) != ncclSuccess) {
            ncclMemFree(send);
            return -1;
        }
        b->send = send;
        b->recv = recv;
        memset(b->send, 0, b->bytes); /* touch every page before the timed calls */
        memset(b->recv, 0, b->bytes);
    } else {
        b->send = perf_mem_alloc(o->device, b->bytes);
        b->recv = perf_mem_alloc(o->device, b->bytes);
    }
    b->host_send = o->device ? perf_mem_alloc(0, b->bytes) : b->send;
    b->host_recv = o->device ? perf_mem_alloc(0, b->bytes) : b->recv;
    b->stream = perf_mem_stream_create(o->device);
    return b->send && b->recv && b->host_send && b->host_recv ? 0 : -1;
}

static void free_bufs(const struct perf_rank *r, struct perf_bufs *b)
{
    int dev = r->opts->device;
    if (dev) {
        perf_mem_free(0, b->host_send);
        perf_mem_free(0, b->host_recv);
    }
    if (r->opts->memalloc) {
        ncclMemFree(b->send);
        ncclMemFree(b->recv);
    } else {
        perf_mem_free(dev, b->send);
        perf_mem_free(dev, b->recv);
    }
    perf_mem_stream_destroy(dev, b->stream);
}

/* Calls fn for every size of the sweep, as nccl-tests steps them. */
static void sweep(const struct perf_rank *r, struct perf_bufs *b, struct perf_totals *tot, int type,
                  int op)
{
    const struct perf_opts *o = r->opts;
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes;) {
        size_t next;
        run_size(r, b, tot, bytes, type, op);
        next =
            o->step_factor > 1 ? (size_t)((double)bytes * o->step_factor) : bytes + o->step_bytes;
        if (next <= bytes) {
            break; /* a zero step (or 0 bytes with a factor) would never end */
        }
        bytes = next;
    }
}

int perf_rank_main(struct perf_rank *r)
{
    const struct perf_opts *o = r->opts;
    const struct perf_coll_info *info = perf_coll_info(o->coll);
    struct perf_totals tot = {0};
    struct perf_bufs b;
    char line[PERF_SLOT_BYTES], host[64], dev[128], *lines = NULL;
    double avg;

    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    perf_mem_describe(o->device, r->gpu, dev, sizeof(dev));
    snprintf(line, sizeof(line), "Rank %2d Group %2d Pid %6d on %10s %s", r->rank, 0, (int)getpid(),
             host, dev);
    if (r->rank == 0) {
        lines = calloc((size_t)r->nranks, PERF_SLOT_BYTES);
    }
    perf_sync_gather(r->sync, r->local, line, lines, r->nranks);
    if (r->rank == 0) {
        print_header(r, lines);
        free(lines);
    }
    if (alloc_bufs(r, &b) != 0) {
        perf_fatal(r, "cannot allocate two buffers of %zu bytes", o->max_bytes);
    }
    for (int ti = 0; ti < o->ntypes; ti++) {
        for (int oi = 0; oi < (info->has_op ? o->nops : 1); oi++) {
            sweep(r, &b, &tot, o->types[ti], info->has_op ? o->ops[oi] : -1);
        }
    }
    free_bufs(r, &b);

    avg = tot.bw_count ? tot.bw_sum / tot.bw_count : 0.0;
    if (r->rank == 0) {
        printf("# Out of bounds values : %ld %s\n", tot.wrong, tot.wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", avg);
        printf("#\n# Collective test concluded: %s\n#\n", info->binary);
        fflush(stdout);
        if (o->json_path != NULL) {
            write_json(r, &tot, avg);
        }
    }
    free(tot.rows);
    return tot.wrong != 0;
}
