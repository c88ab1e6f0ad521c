/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writing a context's events as Chrome trace-event JSON (what Perfetto and
 * chrome://tracing open), one file per rank: pid = rank. Events that nest on the thread
 * that started them (GroupApi, CollApi, P2pApi, KernelLaunch, ProxyCtrl) become "X"
 * complete events on that thread's lane; events that overlap freely (Group, Coll, P2p,
 * ProxyOp, ProxyStep, NetPlugin, KernelCh, KernelPhase, CE) become async "b"/"e" pairs keyed by
 * (cat, id), with tid = 1000 + channel where there is one. State changes become instant
 * events ("i" / async "n"). An event never stopped is written as a lone "B" or "b" with
 * args.unterminated, so a validator flags it. Timestamps are CLOCK_REALTIME
 * microseconds (the monotonic clock rebased at init), comparable across ranks.
 * Runs in finalize, single-threaded, after the core's last call for the context.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "plugin_log.h"
#include "prof.h"

#include "check.h"

#define TID_CHANNEL_BASE 1000
#define MAX_LANES 1000
#define MAX_CHANNELS 256

const char *prof_type_name(uint64_t type)
{
    static const char *const names[] = {
        "Group",     "Coll",         "P2p",       "ProxyOp",  "ProxyStep",
        "ProxyCtrl", "KernelCh",     "NetPlugin", "GroupApi", "CollApi",
        "P2pApi",    "KernelLaunch", "CeColl",    "CeSync",   "CeBatch", "KernelPhase",
    };
    for (int i = 0; i < 16; i++) {
        if (type == (1ull << i)) {
            return names[i];
        }
    }
    return "Unknown";
}

const char *prof_state_name(int state)
{
    static const char *const names[] = {
        "ProxyOpSendPosted",
        "ProxyOpSendRemFifoWait",
        "ProxyOpSendTransmitted",
        "ProxyOpSendDone",
        "ProxyOpRecvPosted",
        "ProxyOpRecvReceived",
        "ProxyOpRecvTransmitted",
        "ProxyOpRecvDone",
        "SendGPUWait",
        "SendWait",
        "RecvWait",
        "RecvFlushWait",
        "RecvGPUWait",
        "Idle",
        "Active",
        "Sleep",
        "Wakeup",
        "Append",
        "AppendEnd",
        "InProgress",
        "SendPeerWait",
        "NetPluginUpdate",
        "KernelChStop",
        "GroupStartApiStop",
        "GroupEndApiStart",
        "CeCollStart",
        "CeCollComplete",
        "CeSyncStart",
        "CeSyncComplete",
        "CeBatchStart",
        "CeBatchComplete",
        "KernelPhaseStop",
    };
    return state >= 0 && state < (int)(sizeof(names) / sizeof(names[0])) ? names[state]
                                                                         : "UnknownState";
}

/* Events written as "X" on their thread; the others are async. */
static int is_sync(uint64_t type)
{
    return type == ncclProfileGroupApi || type == ncclProfileCollApi || type == ncclProfileP2pApi ||
           type == ncclProfileKernelLaunch || type == ncclProfileProxyCtrl;
}

static int event_tid(const prof_event_t *ev)
{
    if (!is_sync(ev->type) && ev->channel >= 0 && ev->channel < MAX_CHANNELS) {
        return TID_CHANNEL_BASE + ev->channel;
    }
    return ev->lane;
}

/* A JSON string, escaped. */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

/* A monotonic stamp as realtime microseconds with ns precision ("ts"). */
static void put_ts(FILE *f, const prof_ctx_t *ctx, uint64_t mono_ns)
{
    uint64_t ns = ctx->clock_base_real_ns + (mono_ns - ctx->clock_base_mono_ns);

    fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static void event_name(const prof_event_t *ev, char *buf, size_t len)
{
    const prof_event_t *op = ev->parent;

    switch (ev->type) {
    case ncclProfileColl:
    case ncclProfileP2p:
    case ncclProfileCeColl:
        snprintf(buf, len, "%s", ev->func[0] != '\0' ? ev->func : prof_type_name(ev->type));
        break;
    case ncclProfileCollApi:
    case ncclProfileP2pApi: snprintf(buf, len, "%s API", ev->func); break;
    case ncclProfileKernelPhase: snprintf(buf, len, "%s", ev->func); break;
    case ncclProfileProxyOp: snprintf(buf, len, "ProxyOp %s", ev->step ? "Send" : "Recv"); break;
    case ncclProfileProxyStep:
        snprintf(buf, len, "ProxyStep%s", op == NULL ? "" : (op->step ? " Send" : " Recv"));
        break;
    default: snprintf(buf, len, "%s", prof_type_name(ev->type)); break;
    }
}

/* The type-specific part of "args" (after commHash, rank and seq). */
static void put_args(FILE *f, const prof_event_t *ev)
{
    switch (ev->type) {
    case ncclProfileColl:
        fprintf(f, ",\"datatype\":");
        put_str(f, ev->dtype);
        fprintf(f, ",\"count\":%zu,\"root\":%d,\"algo\":", ev->count, ev->peer);
        put_str(f, ev->algo);
        fprintf(f, ",\"proto\":");
        put_str(f, ev->proto);
        fprintf(f, ",\"nChannels\":%d,\"nWarps\":%d", ev->nchannels, ev->nwarps);
        break;
    case ncclProfileCollApi:
    case ncclProfileP2pApi:
    case ncclProfileP2p:
    case ncclProfileCeColl:
        fprintf(f, ",\"datatype\":");
        put_str(f, ev->dtype);
        fprintf(f, ",\"count\":%zu", ev->count);
        if (ev->type == ncclProfileP2p) {
            fprintf(f, ",\"peer\":%d,\"nChannels\":%d", ev->peer, ev->nchannels);
        } else if (ev->type != ncclProfileP2pApi) {
            fprintf(f, ",\"root\":%d", ev->peer);
        }
        if (ev->type == ncclProfileCeColl) {
            fprintf(f, ",\"syncStrategy\":");
            put_str(f, ev->algo);
        }
        break;
    case ncclProfileProxyOp:
        fprintf(f, ",\"channel\":%d,\"peer\":%d,\"nSteps\":%d,\"chunkSize\":%d,\"isSend\":%d",
                ev->channel, ev->peer, ev->nchannels, ev->nwarps, ev->step);
        break;
    case ncclProfileProxyStep:
        fprintf(f, ",\"channel\":%d,\"step\":%d", ev->channel, ev->step);
        break;
    case ncclProfileKernelCh: fprintf(f, ",\"channel\":%d", ev->channel); break;
    case ncclProfileKernelPhase:
        fprintf(f, ",\"channel\":%d,\"phaseId\":%d", ev->channel, ev->step);
        break;
    case ncclProfileNetPlugin:
        fprintf(f, ",\"pluginId\":\"0x%" PRIx64 "\",\"bytes\":%zu,\"op\":%d", (uint64_t)ev->net_id,
                ev->count, ev->flag);
        break;
    case ncclProfileGroupApi:
        fprintf(f, ",\"groupDepth\":%d,\"graphCaptured\":%d", ev->step, ev->flag);
        break;
    case ncclProfileCeBatch:
        fprintf(f, ",\"numOps\":%d,\"totalBytes\":%zu", ev->nchannels, ev->count);
        break;
    default: break;
    }
}

/* The fields every record of an event shares: name, cat, pid, tid (and id if async). */
static void put_head(FILE *f, const prof_ctx_t *ctx, const prof_event_t *ev, const char *name,
                     const char *ph)
{
    fprintf(f, ",\n{\"name\":");
    put_str(f, name);
    fprintf(f, ",\"cat\":\"%s\",\"ph\":\"%s\",\"pid\":%d,\"tid\":%d", prof_type_name(ev->type), ph,
            ctx->rank, event_tid(ev));
    if (!is_sync(ev->type)) {
        fprintf(f, ",\"id\":\"0x%zx\"", (size_t)(ev - ctx->events));
    }
    fprintf(f, ",\"ts\":");
}

/* The KernelPhaseStop (or KernelChStop) stamp an event was given, or 0. */
static uint64_t end_stamp(const prof_event_t *ev, int state)
{
    uint64_t end = 0;

    for (int s = 0; s < ev->nstates && s < PROF_MAX_STATES; s++) {
        if (ev->states[s].state == state) {
            end = ev->states[s].arg;
        }
    }
    return end;
}

/* A stamp of the core's timer as a time of this process: the KernelCh event's timer span
 * [ch->ptimer, ch_end] mapped onto the span the event itself had here. */
static uint64_t map_stamp(const prof_event_t *ch, uint64_t ch_end, uint64_t ch_stop, uint64_t t)
{
    double f;

    if (t <= ch->ptimer) {
        return ch->start_ns;
    }
    if (t >= ch_end) {
        return ch_stop;
    }
    f = (double)(t - ch->ptimer) / (double)(ch_end - ch->ptimer);
    return ch->start_ns + (uint64_t)(f * (double)(ch_stop - ch->start_ns));
}

/* A KernelPhase's span on this process's clock. The core stamps phases with the clock of
 * their KernelCh's pTimer (a GPU timer, or the host executor's clock) and may report them
 * after the fact, so the phase is placed within its KernelCh event by where its stamps
 * fall in the KernelCh's own [start, KernelChStop] stamps. Without a KernelCh parent (or
 * stamps), the calls' own times stay. */
static void phase_span(const prof_event_t *ev, uint64_t *start_p, uint64_t *stop_p)
{
    const prof_event_t *ch = ev->parent;
    uint64_t end = end_stamp(ev, ncclProfilerKernelPhaseStop), ch_end, ch_stop;

    if (ch == NULL || ch->type != ncclProfileKernelCh || *stop_p == 0 || end < ev->ptimer) {
        return;
    }
    ch_end = end_stamp(ch, ncclProfilerKernelChStop);
    ch_stop = __atomic_load_n(&ch->stop_ns, __ATOMIC_ACQUIRE);
    if (ch->ptimer == 0 || ch_end <= ch->ptimer || ch_stop < ch->start_ns) {
        return;
    }
    *start_p = map_stamp(ch, ch_end, ch_stop, ev->ptimer);
    *stop_p = map_stamp(ch, ch_end, ch_stop, end);
}

static void put_event(FILE *f, const prof_ctx_t *ctx, const prof_event_t *ev)
{
    uint64_t stop = __atomic_load_n(&ev->stop_ns, __ATOMIC_ACQUIRE), start = ev->start_ns;
    int sync = is_sync(ev->type), nstates = ev->nstates;
    char name[64];

    if (ev->type == ncclProfileKernelPhase) {
        phase_span(ev, &start, &stop);
    }
    event_name(ev, name, sizeof(name));
    put_head(f, ctx, ev, name, stop == 0 ? (sync ? "B" : "b") : (sync ? "X" : "b"));
    put_ts(f, ctx, start);
    if (stop != 0 && sync) {
        uint64_t dur = stop > start ? stop - start : 0;
        fprintf(f, ",\"dur\":%" PRIu64 ".%03u", dur / 1000, (unsigned)(dur % 1000));
    }
    fprintf(f, ",\"args\":{\"commHash\":\"0x%016" PRIx64 "\",\"rank\":%d,\"seq\":%" PRIu64,
            ctx->comm_hash, ctx->rank, ev->seq);
    put_args(f, ev);
    if (ev->tag != 0) {
        fprintf(f, ",\"userTag\":\"0x%" PRIx64 "\"", ev->tag);
    }
    fprintf(f, "%s}}", stop == 0 ? ",\"unterminated\":true" : "");
    if (ev->type == ncclProfileKernelPhase) {
        nstates = 0; /* its one state, the end stamp, is the span's end */
    }
    for (int s = 0; s < nstates && s < PROF_MAX_STATES; s++) {
        put_head(f, ctx, ev, prof_state_name(ev->states[s].state), sync ? "i" : "n");
        put_ts(f, ctx, ev->states[s].ts_ns);
        fprintf(f, "%s,\"args\":{\"arg\":%" PRIu64 "}}", sync ? ",\"s\":\"t\"" : "",
                ev->states[s].arg);
    }
    if (stop != 0 && !sync) {
        put_head(f, ctx, ev, name, "e");
        put_ts(f, ctx, stop);
        fprintf(f, "}");
    }
}

/* Process and thread names, so the tracks read "rank 3" and "channel 1". */
static void put_metadata(FILE *f, const prof_ctx_t *ctx, size_t n)
{
    unsigned char used[TID_CHANNEL_BASE + MAX_CHANNELS] = {0};

    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":", ctx->rank);
    char label[160];
    snprintf(label, sizeof(label), "rank %d %s(comm 0x%016" PRIx64 ")", ctx->rank, ctx->comm_name,
             ctx->comm_hash);
    put_str(f, label);
    fprintf(f,
            "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
            "\"args\":{\"sort_index\":%d}}",
            ctx->rank, ctx->rank);
    for (size_t i = 0; i < n; i++) {
        int tid = event_tid(&ctx->events[i]);
        if (tid < 0 || tid >= TID_CHANNEL_BASE + MAX_CHANNELS || used[tid]) {
            continue;
        }
        used[tid] = 1;
        if (tid >= TID_CHANNEL_BASE) {
            snprintf(label, sizeof(label), "channel %d", tid - TID_CHANNEL_BASE);
        } else {
            snprintf(label, sizeof(label), "thread %d", tid);
        }
        fprintf(f,
                ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":"
                "{\"name\":\"%s\"}}",
                ctx->rank, tid, label);
    }
}

static void put_trace(FILE *f, const prof_ctx_t *ctx, size_t n, size_t dropped)
{
    fprintf(f,
            "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"tool\":\"Braid trace\","
            "\"abiVersion\":%d,\"commHash\":\"0x%016" PRIx64 "\",\"commName\":",
            ctx->version, ctx->comm_hash);
    put_str(f, ctx->comm_name);
    fprintf(f,
            ",\"rank\":%d,\"nranks\":%d,\"nnodes\":%d,\"events\":%zu,\"dropped\":%zu},\n"
            "\"traceEvents\":[\n",
            ctx->rank, ctx->nranks, ctx->nnodes, n, dropped);
    put_metadata(f, ctx, n);
    for (size_t i = 0; i < n; i++) {
        put_event(f, ctx, &ctx->events[i]);
    }
    fprintf(f, "\n]}\n");
}

ncclResult_t prof_trace_write(prof_ctx_t *ctx, char *path_out, size_t pathlen)
{
    size_t n = __atomic_load_n(&ctx->next, __ATOMIC_RELAXED);
    size_t dropped = __atomic_load_n(&ctx->dropped, __ATOMIC_RELAXED), unterminated = 0;
    char path[600], tmp[620];
    ncclResult_t res = ncclSuccess;
    FILE *f;

    n = n < ctx->capacity ? n : ctx->capacity;
    snprintf(path, sizeof(path), "%s/braid-trace-%016" PRIx64 "-r%d.json", ctx->dir, ctx->comm_hash,
             ctx->rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (f == NULL) {
        BR_WARN(NCCL_INIT, "profiler: cannot create %s: %s", tmp, strerror(errno));
        return ncclSystemError;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    put_trace(f, ctx, n, dropped);
    if (ferror(f) | fclose(f)) {
        BR_WARN(NCCL_INIT, "profiler: writing %s failed: %s", tmp, strerror(errno));
        remove(tmp);
        return ncclSystemError;
    }
    BR_SYS_GOTO(rename(tmp, path), res, out);
    for (size_t i = 0; i < n; i++) {
        unterminated += ctx->events[i].stop_ns == 0;
    }
    if (dropped > 0 || unterminated > 0) {
        BR_WARN(NCCL_INIT,
                "profiler: %s: %zu events dropped (pool of %zu full, see "
                "BRAID_PROFILER_EVENTS), %zu never stopped",
                path, dropped, ctx->capacity, unterminated);
    }
    BR_INFO(NCCL_INIT, "profiler: wrote %zu events to %s", n, path);
    if (path_out != NULL) {
        snprintf(path_out, pathlen, "%s", path);
    }
out:
    return res;
}
