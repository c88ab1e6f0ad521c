/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The user-buffer path of net connections (issue 19): large Send/Recv steps go from the
 * user's send buffer to the plugin and from the plugin into the user's receive buffer,
 * registered with regMr as NCCL_PTR_HOST, instead of through the FIFO slots. Each
 * operation is a segment of the connection's steps (br_net_useg_t); the step accounting
 * (tail, head, acknowledgements, failover's resend from the receiver's count) is the
 * FIFO's, only the bytes of a step live elsewhere. Such a message carries no descriptor:
 * the receiver knows its operation and checks the size. A regMr that fails stages that
 * operation's steps through the FIFO slots on that end (an INFO line says so), with the
 * same messages on the wire, so the other end never notices.
 * Threading: everything here runs under the proxy lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy_int.h"
#include "util.h"

static size_t seg_step_bytes(const br_net_conn_t *nc, const br_net_useg_t *s, uint64_t step)
{
    (void)nc;
    size_t off = (size_t)(step - s->first) * s->unit;
    return s->bytes - off < s->unit ? s->bytes - off : s->unit;
}

br_net_useg_t *br_proxy_useg_of(const br_net_conn_t *nc, uint64_t step)
{
    for (br_net_useg_t *s = nc->useg; s != NULL; s = s->next) {
        if (s->first <= step && step < s->end) {
            return s;
        }
    }
    return NULL;
}

void br_net_regs_init(br_net_regs_t *regs)
{
    pthread_mutex_init(&regs->lock, NULL);
    regs->list = NULL;
    regs->next_id = 1;
}

void br_net_regs_fini(br_net_regs_t *regs)
{
    while (regs->list != NULL) {
        br_net_reg_range_t *r = regs->list;
        regs->list = r->next;
        free(r);
    }
    pthread_mutex_destroy(&regs->lock);
}

ncclResult_t br_net_regs_add(br_net_regs_t *regs, void *base, size_t len, uint64_t *id_p)
{
    br_net_reg_range_t *r = NULL;

    BR_CHECK(br_calloc(&r, 1, "registered buffer"));
    r->base = base;
    r->len = len;
    pthread_mutex_lock(&regs->lock);
    r->id = regs->next_id++;
    r->next = regs->list;
    regs->list = r;
    pthread_mutex_unlock(&regs->lock);
    *id_p = r->id;
    return ncclSuccess;
}

static void rcache_drop(br_net_conn_t *nc, uint64_t id, int all)
{
    for (br_net_rcache_t **at = &nc->rcache; *at != NULL;) {
        br_net_rcache_t *e = *at;
        if (!all && e->id != id) {
            at = &e->next;
            continue;
        }
        *at = e->next;
        if (e->mh != NULL && nc->comm != NULL) {
            (void)nc->net->ops->dereg_mr(nc->net, nc->comm, e->mh);
        }
        free(e);
    }
}

void br_net_regs_remove(br_net_regs_t *regs, br_proxy_t *proxy, uint64_t id)
{
    pthread_mutex_lock(&regs->lock);
    for (br_net_reg_range_t **at = &regs->list; *at != NULL; at = &(*at)->next) {
        if ((*at)->id == id) {
            br_net_reg_range_t *r = *at;
            *at = r->next;
            free(r);
            break;
        }
    }
    pthread_mutex_unlock(&regs->lock);
    if (proxy == NULL) {
        return;
    }
    pthread_mutex_lock(&proxy->lock);
    for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
        rcache_drop(nc, id, 0);
    }
    pthread_mutex_unlock(&proxy->lock);
}

/* The connection's registration of the registered buffer that holds [ptr, ptr + bytes),
 * made now if it has none; NULL when no registered buffer holds it (or the plugin
 * refused it, which the caller's own regMr then reports). */
static void *rcache_find(br_proxy_t *proxy, br_net_conn_t *nc, const char *ptr, size_t bytes)
{
    br_net_reg_range_t found = {0};

    if (proxy->regs == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&proxy->regs->lock);
    for (br_net_reg_range_t *r = proxy->regs->list; r != NULL; r = r->next) {
        if (ptr >= r->base && ptr + bytes <= r->base + r->len) {
            found = *r;
            break;
        }
    }
    pthread_mutex_unlock(&proxy->regs->lock);
    if (found.id == 0) {
        return NULL;
    }
    for (br_net_rcache_t *e = nc->rcache; e != NULL; e = e->next) {
        if (e->id == found.id) {
            return e->mh;
        }
    }
    br_net_rcache_t *e = NULL;
    void *mh = NULL;
    if (BR_PARAM_INT(NET_USERBUF_FAIL_REG) ||
        nc->net->ops->reg_mr(nc->net, nc->comm, found.base, found.len, NCCL_PTR_HOST, &mh) !=
            ncclSuccess ||
        mh == NULL || br_calloc(&e, 1, "registration cache") != ncclSuccess) {
        if (mh != NULL) {
            (void)nc->net->ops->dereg_mr(nc->net, nc->comm, mh);
        }
        return NULL;
    }
    e->id = found.id;
    e->mh = mh;
    e->next = nc->rcache;
    nc->rcache = e;
    BR_INFO(NCCL_NET | NCCL_REG,
            "rank %d: registered buffer %p (%zu bytes, ncclCommRegister) registered with net "
            "plugin %s for %s rank %d until ncclCommDeregister",
            proxy->rank, (void *)found.base, found.len, nc->net->name,
            nc->is_send ? "sends to" : "receives from", nc->peer);
    return mh;
}

/* Register the segment's buffer (or the operation's buffer it lies in) with the
 * connection's current comm, once; a refusal stages the operation through the FIFO (said
 * at INFO, not silently). */
static void seg_register(br_proxy_t *proxy, br_net_conn_t *nc, br_net_useg_t *s)
{
    ncclResult_t res = ncclInternalError;
    br_net_ureg_t *g = s->reg;
    char *ptr = g != NULL ? g->base : s->ptr;
    size_t bytes = g != NULL ? g->len : s->bytes;

    if (s->mh != NULL || s->staged) {
        return;
    }
    if (g != NULL && (g->mh != NULL || g->refused)) {
        s->mh = g->mh;
        s->staged = g->refused;
        s->cached = g->cached;
        return;
    }
    if ((s->mh = rcache_find(proxy, nc, ptr, bytes)) != NULL) {
        s->cached = 1;
        if (g != NULL) {
            g->mh = s->mh;
            g->cached = 1;
        }
        return;
    }
    if (!BR_PARAM_INT(NET_USERBUF_FAIL_REG)) {
        res = nc->net->ops->reg_mr(nc->net, nc->comm, ptr, bytes, NCCL_PTR_HOST, &s->mh);
    }
    if (res != ncclSuccess || s->mh == NULL) {
        s->mh = NULL;
        s->staged = 1;
        /* INFO once per connection; each further operation at TRACE. */
        if (!nc->reg_refused) {
            BR_INFO(NCCL_NET | NCCL_REG,
                    "rank %d: net plugin %s did not register the %zu-byte user buffer at %p "
                    "(%s rank %d, error %d): this operation, and any other on this connection "
                    "whose buffer is refused, moves through the FIFO",
                    proxy->rank, nc->net->name, bytes, (void *)ptr,
                    nc->is_send ? "send to" : "receive from", nc->peer, (int)res);
        }
        BR_TRACE(NCCL_NET | NCCL_REG, "rank %d: user buffer %p (%zu bytes) staged through the FIFO",
                 proxy->rank, (void *)ptr, bytes);
        nc->reg_refused = 1;
    }
    if (g != NULL) {
        g->mh = s->mh;
        g->refused = s->staged;
    }
}

ncclResult_t br_proxy_useg_post(br_proxy_t *proxy, br_net_conn_t *nc, br_net_useg_t *s,
                                uint64_t step, void **req_p)
{
    int slot = (int)(step % BR_STEPS);
    size_t n = seg_step_bytes(nc, s, step);
    char *user = s->ptr + (size_t)(step - s->first) * s->unit;
    char *fifo = nc->buf + (size_t)slot * nc->stride;

    seg_register(proxy, nc, s);
    if (nc->is_send) {
        if (s->staged) {
            memcpy(fifo, user, n); /* the executor keeps user alive until head passes */
        }
        return nc->net->ops->isend(nc->net, nc->comm, s->staged ? fifo : user, n, proxy->rank,
                                   s->staged ? nc->mhandle : s->mh, &nc->ph[slot], req_p);
    }
    void *data = s->staged ? fifo : user;
    size_t size = n;
    int tag = nc->peer;
    void *mh = s->staged ? nc->mhandle : s->mh;
    void *ph = &nc->ph[slot];
    return nc->net->ops->irecv(nc->net, nc->comm, 1, &data, &size, &tag, &mh, &ph, req_p);
}

int br_proxy_useg_recv_done(br_proxy_t *proxy, br_net_conn_t *nc, br_net_useg_t *s, uint64_t step,
                            int size)
{
    int slot = (int)(step % BR_STEPS);
    size_t n = seg_step_bytes(nc, s, step);

    if (size < 0 || (size_t)size != n) {
        char what[160];
        snprintf(what, sizeof(what),
                 "receive into the user buffer (%d bytes arrived, the operation expects %zu: "
                 "mismatched Send/Recv sizes?)",
                 size, n);
        br_proxy_fail_recv(proxy, nc, ncclRemoteError, what);
        return -1;
    }
    if (s->staged) {
        memcpy(s->ptr + (size_t)(step - s->first) * s->unit, nc->buf + (size_t)slot * nc->stride,
               n);
    }
    br_slot_desc_t d = s->desc;
    d.bytes = n;
    nc->ctrl->slot[slot] = d;
    return 0;
}

static void reg_free(br_net_conn_t *nc, br_net_ureg_t *g)
{
    for (br_net_ureg_t **at = &nc->ureg; *at != NULL; at = &(*at)->next) {
        if (*at == g) {
            *at = g->next;
            break;
        }
    }
    if (g->mh != NULL && !g->cached && nc->comm != NULL) {
        (void)nc->net->ops->dereg_mr(nc->net, nc->comm, g->mh);
    }
    free(g);
}

static void reg_put(br_net_conn_t *nc, br_net_ureg_t *g)
{
    if (--g->refs > 0 || g->held) {
        return;
    }
    reg_free(nc, g);
}

static void seg_free(br_net_conn_t *nc, br_net_useg_t *s)
{
    if (s->reg != NULL) {
        reg_put(nc, s->reg);
    } else if (s->mh != NULL && !s->cached && nc->comm != NULL) {
        (void)nc->net->ops->dereg_mr(nc->net, nc->comm, s->mh);
    }
    free(s);
}

void br_proxy_useg_retire(br_net_conn_t *nc)
{
    /* A send step may be sent again after a failover until the receiver confirmed it. */
    uint64_t upto = nc->is_send ? br_proxy_link_head(nc) : nc->done;

    while (nc->useg != NULL && nc->useg->end <= upto) {
        br_net_useg_t *s = nc->useg;
        nc->useg = s->next;
        seg_free(nc, s);
    }
}

void br_proxy_useg_drop_regs(br_net_conn_t *nc)
{
    for (br_net_useg_t *s = nc->useg; s != NULL; s = s->next) {
        if (s->reg == NULL && s->mh != NULL && !s->cached && nc->comm != NULL) {
            (void)nc->net->ops->dereg_mr(nc->net, nc->comm, s->mh);
        }
        s->mh = NULL;
        s->cached = 0;
    }
    for (br_net_ureg_t *g = nc->ureg; g != NULL; g = g->next) {
        if (g->mh != NULL && !g->cached && nc->comm != NULL) {
            (void)nc->net->ops->dereg_mr(nc->net, nc->comm, g->mh);
        }
        g->mh = NULL;
        g->cached = 0;
    }
    rcache_drop(nc, 0, 1);
}

void br_proxy_useg_free_all(br_net_conn_t *nc)
{
    while (nc->useg != NULL) {
        br_net_useg_t *s = nc->useg;
        nc->useg = s->next;
        seg_free(nc, s);
    }
    while (nc->ureg != NULL) { /* held by an executor that failed */
        reg_free(nc, nc->ureg);
    }
    rcache_drop(nc, 0, 1);
}

/* Queue steps [first, first + nsteps) of nc as bytes at ptr, unit bytes per step (the
 * last may be shorter). A step of the same operation (key > 0) that continues the last
 * segment in memory and in steps extends it instead, so a ring's contiguous chunks are
 * registered once. */
static ncclResult_t seg_add(br_net_conn_t *nc, uint64_t first, uint64_t nsteps, const void *ptr,
                            size_t bytes, size_t unit, uint64_t key, const br_slot_desc_t *d,
                            const void *base, size_t len, br_net_useg_t **seg_p)
{
    br_net_useg_t *s = NULL, **at = &nc->useg, *last = NULL;
    br_net_ureg_t *g = NULL;

    while (*at != NULL) {
        last = *at;
        at = &(*at)->next;
    }
    if (key != 0 && last != NULL && last->key == key && last->end == first && nsteps == 1 &&
        (base != NULL ? last->reg != NULL && last->reg->base == (const char *)base
                      : last->reg == NULL && last->mh == NULL && !last->staged) &&
        last->ptr + last->bytes == (const char *)ptr &&
        last->bytes == (size_t)(last->end - last->first) * last->unit && bytes <= last->unit) {
        last->end++;
        last->bytes += bytes;
        *seg_p = last;
        return ncclSuccess;
    }
    if (base != NULL) {
        for (g = nc->ureg; g != NULL && !(g->key == key && g->base == (const char *)base);
             g = g->next) {
        }
        if (g == NULL) {
            BR_CHECK(br_calloc(&g, 1, "user-buffer registration"));
            g->key = key;
            g->base = (char *)base;
            g->len = len;
            g->next = nc->ureg;
            nc->ureg = g;
        }
    }
    if (br_calloc(&s, 1, "user-buffer operation") != ncclSuccess) {
        if (g != NULL && g->refs == 0) {
            g->refs = 1;
            reg_put(nc, g);
        }
        return ncclSystemError;
    }
    if (g != NULL) {
        g->refs++;
        s->reg = g;
    }
    s->first = first;
    s->end = first + nsteps;
    s->ptr = (char *)ptr; /* a send buffer is only read */
    s->bytes = bytes;
    s->unit = unit;
    s->key = key;
    if (d != NULL) {
        s->desc = *d;
    }
    *at = s;
    *seg_p = s;
    BR_TRACE(NCCL_NET, "%s rank %d: steps [%llu, %llu) %s the user buffer at %p (%zu bytes)",
             nc->is_send ? "send to" : "receive from", nc->peer, (unsigned long long)s->first,
             (unsigned long long)s->end, nc->is_send ? "from" : "into", (void *)s->ptr, bytes);
    return ncclSuccess;
}

ncclResult_t br_proxy_userbuf_send(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t first,
                                   uint64_t nsteps, const void *ptr, size_t bytes)
{
    pthread_mutex_lock(&proxy->lock);
    br_net_useg_t *seg;
    ncclResult_t res =
        seg_add(nc, first, nsteps, ptr, bytes, nc->step_size, 0, NULL, NULL, 0, &seg);
    pthread_mutex_unlock(&proxy->lock);
    return res;
}

ncclResult_t br_proxy_userbuf_send_step(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t step,
                                        const void *ptr, size_t bytes, uint64_t key,
                                        const void *base, size_t len)
{
    pthread_mutex_lock(&proxy->lock);
    br_net_useg_t *seg;
    ncclResult_t res = seg_add(nc, step, 1, ptr, bytes, bytes, key, NULL, base, len, &seg);
    if (res == ncclSuccess && seg->reg != NULL) {
        seg->reg->held = 1; /* more steps may follow once these are done */
    }
    pthread_mutex_unlock(&proxy->lock);
    return res;
}

void br_proxy_userbuf_release(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t key)
{
    pthread_mutex_lock(&proxy->lock);
    for (br_net_ureg_t *g = nc->ureg, *next; g != NULL; g = next) {
        next = g->next;
        if (g->key == key) {
            g->held = 0;
            if (g->refs == 0) {
                reg_free(nc, g);
            }
        }
    }
    pthread_mutex_unlock(&proxy->lock);
}

ncclResult_t br_proxy_userbuf_recv(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t nsteps, void *ptr,
                                   size_t bytes, const br_slot_desc_t *d)
{
    pthread_mutex_lock(&proxy->lock);
    /* Under the lock the proxy posts nothing: the segment is in place before `want`
     * lets it post these steps, so none of them goes into a FIFO slot. The step before
     * them is the sender's descriptor, through the FIFO. */
    uint64_t first = atomic_load_explicit(&nc->want, memory_order_relaxed) + 1;
    br_net_useg_t *seg;
    ncclResult_t res = seg_add(nc, first, nsteps, ptr, bytes, nc->step_size, 0, d, NULL, 0, &seg);
    if (res == ncclSuccess) {
        seg->ack_end = 1;
        atomic_fetch_add_explicit(&nc->want, nsteps + 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&proxy->lock);
    return res;
}

ncclResult_t br_proxy_userbuf_recv_steps(br_proxy_t *proxy, br_net_conn_t *nc,
                                         const br_userbuf_step_t *steps, uint64_t n,
                                         const br_slot_desc_t *d, const void *base, size_t len)
{
    ncclResult_t res = ncclSuccess;
    br_net_useg_t *end_seg = NULL;

    pthread_mutex_lock(&proxy->lock);
    /* As above: in place before `want` lets the proxy post any of these steps. */
    uint64_t first = atomic_load_explicit(&nc->want, memory_order_relaxed);
    for (uint64_t i = 0; i < n && res == ncclSuccess; i++) {
        if (steps[i].ptr != NULL) {
            res = seg_add(nc, first + i, 1, steps[i].ptr, steps[i].bytes, steps[i].bytes, d->seq, d,
                          base, len, &end_seg);
        }
    }
    if (res == ncclSuccess) {
        if (end_seg != NULL) {
            end_seg->ack_end = 1;
        }
        atomic_fetch_add_explicit(&nc->want, n, memory_order_relaxed);
    }
    pthread_mutex_unlock(&proxy->lock);
    return res;
}

void br_proxy_userbuf_abandon(br_proxy_t *proxy)
{
    pthread_mutex_lock(&proxy->lock);
    for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
        if (nc->useg == NULL) {
            br_proxy_useg_free_all(nc); /* registrations a failed executor still held */
            continue;
        }
        BR_INFO(NCCL_NET | NCCL_PROXY,
                "rank %d: closing the %s connection %s rank %d: a failed operation left "
                "transfers from or into user buffers on it",
                proxy->rank, nc->is_send ? "send" : "receive", nc->is_send ? "to" : "from",
                nc->peer);
        br_proxy_comm_close(proxy, nc);
        br_proxy_useg_free_all(nc);
        if (nc->is_send) {
            br_proxy_fail_send(proxy, nc, ncclRemoteError, "send (abandoned after a failure)");
        } else {
            br_proxy_fail_recv(proxy, nc, ncclRemoteError, "receive (abandoned after a failure)");
        }
    }
    pthread_mutex_unlock(&proxy->lock);
}
