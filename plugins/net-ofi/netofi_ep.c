/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Endpoints: one fabric, domain, address vector, completion queue and FI_EP_RDM endpoint
 * per device and process, shared by all its connections (and contexts), so whichever
 * thread polls moves every connection: a rank that alternates between its own send and
 * receive, or two communicators of one thread, never wait on a peer nobody progresses.
 * Progress is manual: netofi_ep_progress reads the completion queue (which also drives
 * providers with FI_PROGRESS_MANUAL) and retries posts the provider refused with EAGAIN.
 * Also here: connection ids (a bitmap), the address cache (an open-addressing hash table
 * of peer endpoint names) and memory registration as the provider's MR mode requires.
 *
 * Threading: ep->lock guards the endpoint and everything reached through it; callers of
 * the functions marked "lock held" own it. The reference count is changed under it too.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "netofi.h"

#define NETOFI_CQ_BATCH 16
#define NETOFI_CQ_ROUNDS 8 /* batches read per progress call, so one call stays short */
#define NETOFI_AV_INIT 64
#define NETOFI_DRAIN_SECONDS 1.0 /* how long a closing endpoint waits for zombies */

/* The process's endpoints, one per device; lock order: table, then endpoint. */
static pthread_mutex_t netofi_ep_table_lock = PTHREAD_MUTEX_INITIALIZER;
static netofi_ep_t *netofi_ep_table[NETOFI_MAX_DEVS];

static void ep_destroy(netofi_ep_t *ep);

static void warn_fi(const netofi_ep_t *ep, const char *what, int rc)
{
    BR_WARN(NCCL_NET, "net-ofi: %s failed on %s: %s (provider %s)", what, ep->dev->name,
            netofi_fi.strerror(rc < 0 ? -rc : rc), netofi_fabric_prov());
}

/*
 * The fi_info to open ep's endpoint with: dev->info itself, or for shm a copy with a source
 * address of its own (kept in ep->shm_info until the endpoint closes). shm names an
 * endpoint's region in /dev/shm after the source address, by default "fi_shm://<pid>" (the
 * pid of fi_getinfo's caller), as "<pid>:<uid>:<n>". A region stays behind when its process
 * exits without closing the endpoint (killed, crashed, a leaked connection), and fi_enable
 * then fails with EBUSY in the later process that reuses that pid: shm finds the region and
 * the pid it records alive. A random suffix keeps our names clear of regions left by
 * earlier processes (and of a parent's, after a fork).
 */
static ncclResult_t ep_info(netofi_ep_t *ep, struct fi_info **info_p)
{
    struct fi_info *info = ep->dev->info;
    unsigned long long nonce = 0;
    char addr[64];

    *info_p = info;
    if (strcmp(info->fabric_attr->prov_name, "shm") != 0 || info->addr_format != FI_ADDR_STR) {
        return ncclSuccess;
    }
    if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce)) {
        nonce = (unsigned long long)(netofi_now() * 1e9) ^ (uintptr_t)ep;
    }
    snprintf(addr, sizeof(addr), "fi_shm://%ld-%016llx", (long)getpid(), nonce);
    ep->shm_info = netofi_fi.dupinfo(info);
    if (ep->shm_info != NULL) {
        free(ep->shm_info->src_addr);
        ep->shm_info->src_addr = strdup(addr);
        ep->shm_info->src_addrlen = strlen(addr) + 1;
    }
    if (ep->shm_info == NULL || ep->shm_info->src_addr == NULL) {
        BR_WARN(NCCL_NET, "net-ofi: out of memory for an endpoint");
        return ncclSystemError; /* ep_destroy frees shm_info */
    }
    *info_p = ep->shm_info;
    return ncclSuccess;
}

static ncclResult_t open_objects(netofi_ep_t *ep)
{
    struct fi_info *info = ep->dev->info, *ep_fi;
    struct fi_av_attr av_attr = {0};
    struct fi_cq_attr cq_attr = {0};
    int rc;

    rc = netofi_fi.fabric(info->fabric_attr, &ep->fabric, NULL);
    if (rc != 0) {
        warn_fi(ep, "fi_fabric", rc);
        return ncclSystemError;
    }
    rc = fi_domain(ep->fabric, info, &ep->domain, NULL);
    if (rc != 0) {
        warn_fi(ep, "fi_domain", rc);
        return ncclSystemError;
    }
    av_attr.type =
        info->domain_attr->av_type != FI_AV_UNSPEC ? info->domain_attr->av_type : FI_AV_TABLE;
    rc = fi_av_open(ep->domain, &av_attr, &ep->av, NULL);
    if (rc != 0) {
        warn_fi(ep, "fi_av_open", rc);
        return ncclSystemError;
    }
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_NONE; /* polled from test(); never waited on */
    rc = fi_cq_open(ep->domain, &cq_attr, &ep->cq, NULL);
    if (rc != 0) {
        warn_fi(ep, "fi_cq_open", rc);
        return ncclSystemError;
    }
    if (ep_info(ep, &ep_fi) != ncclSuccess) {
        return ncclSystemError;
    }
    rc = fi_endpoint(ep->domain, ep_fi, &ep->ep, NULL);
    if (rc != 0) {
        warn_fi(ep, "fi_endpoint", rc);
        return ncclSystemError;
    }
    rc = fi_ep_bind(ep->ep, &ep->av->fid, 0);
    if (rc == 0) {
        rc = fi_ep_bind(ep->ep, &ep->cq->fid, FI_TRANSMIT | FI_RECV);
    }
    if (rc != 0) {
        warn_fi(ep, "fi_ep_bind", rc);
        return ncclSystemError;
    }
    rc = fi_enable(ep->ep);
    if (rc != 0) {
        warn_fi(ep, "fi_enable", rc);
        return ncclSystemError;
    }
    ep->name_len = sizeof(ep->name);
    rc = fi_getname(&ep->ep->fid, ep->name, &ep->name_len);
    if (rc == -FI_ETOOSMALL) {
        BR_WARN(NCCL_NET,
                "net-ofi: endpoint name of %zu bytes does not fit the %d bytes a handle "
                "carries (provider %s)",
                ep->name_len, NETOFI_NAME_MAX, netofi_fabric_prov());
        return ncclSystemError;
    }
    if (rc != 0) {
        warn_fi(ep, "fi_getname", rc);
        return ncclSystemError;
    }
    return ncclSuccess;
}

static ncclResult_t ep_create(netofi_dev_t *dev, netofi_ep_t **ep_p)
{
    netofi_ep_t *ep = calloc(1, sizeof(*ep));
    ncclResult_t res;

    if (ep == NULL) {
        BR_WARN(NCCL_NET, "net-ofi: out of memory for an endpoint");
        return ncclSystemError;
    }
    ep->dev = dev;
    ep->refs = 1;
    ep->next_mr_key = 1;
    ep->ids = calloc((1u << NETOFI_ID_BITS) / 32, sizeof(uint32_t));
    ep->av_cap = NETOFI_AV_INIT;
    ep->av_cache = calloc(ep->av_cap, sizeof(*ep->av_cache));
    pthread_mutex_init(&ep->lock, NULL);
    if (ep->ids == NULL || ep->av_cache == NULL) {
        BR_WARN(NCCL_NET, "net-ofi: out of memory for an endpoint");
        res = ncclSystemError;
        goto err_destroy;
    }
    res = open_objects(ep);
    if (res != ncclSuccess) {
        goto err_destroy;
    }
    BR_TRACE(NCCL_NET, "net-ofi: endpoint %p open on %s", (void *)ep, dev->name);
    *ep_p = ep;
    return ncclSuccess;

err_destroy:
    ep_destroy(ep);
    return res;
}

static void close_fid(struct fid *fid, const char *what)
{
    int rc = fid != NULL ? fi_close(fid) : 0;

    if (rc != 0) {
        BR_INFO(NCCL_NET, "net-ofi: closing the %s failed: %s", what, netofi_fi.strerror(-rc));
    }
}

double netofi_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Let closed connections' operations finish before the endpoint goes: tcp;ofi_rxm 1.17
 * crashes in fi_close when a rendezvous transfer is still running. Bounded, and only at
 * the end of the last user, so a peer that is gone costs at most NETOFI_DRAIN_SECONDS. */
static void ep_drain(netofi_ep_t *ep)
{
    double end = netofi_now() + NETOFI_DRAIN_SECONDS;

    pthread_mutex_lock(&ep->lock);
    while (ep->zombies != NULL && ep->err == ncclSuccess && netofi_now() < end) {
        (void)netofi_ep_progress(ep);
        pthread_mutex_unlock(&ep->lock);
        sched_yield();
        pthread_mutex_lock(&ep->lock);
    }
    if (ep->zombies != NULL) {
        BR_INFO(NCCL_NET,
                "net-ofi: closing the endpoint on %s with operations of closed connections "
                "still in flight",
                ep->dev->name);
    }
    pthread_mutex_unlock(&ep->lock);
}

static void ep_destroy(netofi_ep_t *ep)
{
    if (ep->ep != NULL && ep->cq != NULL) {
        ep_drain(ep);
    }
    /* Closing the endpoint ends every operation still posted, so the connections that
     * were waiting for completions (zombies) can go after it, before their domain. */
    close_fid(ep->ep ? &ep->ep->fid : NULL, "endpoint");
    while (ep->zombies != NULL) {
        netofi_comm_t *c = ep->zombies;
        ep->zombies = c->zombie_next;
        netofi_conn_free(c);
    }
    close_fid(ep->av ? &ep->av->fid : NULL, "address vector");
    close_fid(ep->cq ? &ep->cq->fid : NULL, "completion queue");
    close_fid(ep->domain ? &ep->domain->fid : NULL, "domain");
    close_fid(ep->fabric ? &ep->fabric->fid : NULL, "fabric");
    if (ep->shm_info != NULL) {
        netofi_fi.freeinfo(ep->shm_info);
    }
    pthread_mutex_destroy(&ep->lock);
    free(ep->av_cache);
    free(ep->ids);
    free(ep);
}

ncclResult_t netofi_ep_get(int dev, netofi_ep_t **ep_p)
{
    netofi_dev_t *d = netofi_fabric_dev(dev);
    netofi_ep_t *ep;
    ncclResult_t res = ncclSuccess;

    if (d == NULL) {
        return ncclInternalError;
    }
    pthread_mutex_lock(&netofi_ep_table_lock);
    ep = netofi_ep_table[dev];
    if (ep != NULL) {
        pthread_mutex_lock(&ep->lock);
        ep->refs++;
        pthread_mutex_unlock(&ep->lock);
    } else {
        res = ep_create(d, &ep);
        if (res == ncclSuccess) {
            ep->index = dev;
            netofi_ep_table[dev] = ep;
        }
    }
    pthread_mutex_unlock(&netofi_ep_table_lock);
    if (res == ncclSuccess) {
        *ep_p = ep;
    }
    return res;
}

void netofi_ep_release(netofi_ep_t *ep)
{
    int last;

    /* Under the table lock, so no netofi_ep_get can revive an endpoint going away.
     * Increments elsewhere happen only while the caller holds a reference. */
    pthread_mutex_lock(&netofi_ep_table_lock);
    pthread_mutex_lock(&ep->lock);
    last = --ep->refs == 0;
    if (last) {
        netofi_ep_table[ep->index] = NULL;
    }
    pthread_mutex_unlock(&ep->lock);
    pthread_mutex_unlock(&netofi_ep_table_lock);
    if (last) {
        ep_destroy(ep);
    }
}

ncclResult_t netofi_ep_post(netofi_ep_t *ep, netofi_req_t *req, int *posted_p)
{
    const netofi_dev_t *dev = ep->dev;
    uint64_t tag = req->tag | req->chunk;
    size_t left = req->size - req->done;
    void *buf;
    ssize_t rc;

    req->chunk_len = left < dev->max_msg ? left : dev->max_msg;
    /* Empty chunks carry no buffer: some providers reject a non-NULL one with length 0. */
    buf = req->chunk_len ? req->buf + req->done : NULL;
    if (req->op == NETOFI_OP_SEND || req->op == NETOFI_OP_CTRL_SEND) {
        rc = fi_tsend(ep->ep, buf, req->chunk_len, req->desc, req->addr, tag, &req->fictx);
    } else {
        rc = fi_trecv(ep->ep, buf, req->chunk_len, req->desc, FI_ADDR_UNSPEC, tag, 0, &req->fictx);
    }
    if (rc == -FI_EAGAIN) {
        *posted_p = 0;
        return ncclSuccess;
    }
    if (rc != 0) {
        warn_fi(ep,
                req->op == NETOFI_OP_SEND || req->op == NETOFI_OP_CTRL_SEND ? "fi_tsend"
                                                                            : "fi_trecv",
                (int)rc);
        return ncclSystemError;
    }
    req->state = NETOFI_REQ_POSTED;
    req->comm->inflight++;
    *posted_p = 1;
    return ncclSuccess;
}

ncclResult_t netofi_ep_post_or_queue(netofi_ep_t *ep, netofi_req_t *req)
{
    int posted = 0;
    ncclResult_t res = ep->pending_head == NULL ? netofi_ep_post(ep, req, &posted) : ncclSuccess;

    /* Behind a queue, post nothing directly: the queue keeps its order. */
    if (res == ncclSuccess && !posted) {
        req->state = NETOFI_REQ_PENDING;
        req->comm->queued++;
        req->next = NULL;
        if (ep->pending_tail != NULL) {
            ep->pending_tail->next = req;
        } else {
            ep->pending_head = req;
        }
        ep->pending_tail = req;
    }
    return res;
}

void netofi_ep_unqueue(netofi_ep_t *ep, netofi_req_t *req)
{
    netofi_req_t **pp = &ep->pending_head, *prev = NULL;

    if (req->state != NETOFI_REQ_PENDING) {
        return;
    }
    while (*pp != NULL && *pp != req) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == req) {
        *pp = req->next;
        if (ep->pending_tail == req) {
            ep->pending_tail = prev;
        }
        req->next = NULL;
        req->comm->queued--;
    }
}

static void retry_pending(netofi_ep_t *ep)
{
    while (ep->pending_head != NULL) {
        netofi_req_t *req = ep->pending_head;
        int posted = 0;
        ncclResult_t res = netofi_ep_post(ep, req, &posted);

        if (res == ncclSuccess && !posted) {
            return; /* still full; try again on the next progress call */
        }
        ep->pending_head = req->next;
        if (ep->pending_head == NULL) {
            ep->pending_tail = NULL;
        }
        req->next = NULL;
        req->comm->queued--;
        if (res != ncclSuccess) {
            req->state = NETOFI_REQ_ERROR;
            req->err = res;
            if (req->op == NETOFI_OP_CTRL_SEND || req->op == NETOFI_OP_CTRL_RECV) {
                req->comm->err = res;
            }
            netofi_conn_reap(ep, req->comm);
        }
    }
}

void netofi_ep_cancel(netofi_ep_t *ep, netofi_req_t *req)
{
    if (req->state == NETOFI_REQ_POSTED) {
        /* Whether or not this succeeds, exactly one completion for req still arrives
         * (FI_ECANCELED or the normal one), which is what the inflight count expects. */
        (void)fi_cancel(&ep->ep->fid, &req->fictx);
    }
}

static void read_cq_error(netofi_ep_t *ep)
{
    struct fi_cq_err_entry e;
    ssize_t rc;

    memset(&e, 0, sizeof(e));
    rc = fi_cq_readerr(ep->cq, &e, 0);
    if (rc == -FI_EAGAIN) {
        return;
    }
    if (rc < 0) {
        warn_fi(ep, "fi_cq_readerr", (int)rc);
        ep->err = ncclSystemError;
        return;
    }
    if (e.op_context == NULL) {
        char buf[256];
        BR_WARN(NCCL_NET, "net-ofi: error without an operation on %s: %s (%s)", ep->dev->name,
                netofi_fi.strerror(e.err),
                fi_cq_strerror(ep->cq, e.prov_errno, e.err_data, buf, sizeof(buf)));
        return;
    }
    netofi_data_fail(ep, (netofi_req_t *)e.op_context, &e);
}

ncclResult_t netofi_ep_progress(netofi_ep_t *ep)
{
    struct fi_cq_tagged_entry cqe[NETOFI_CQ_BATCH];

    if (ep->err != ncclSuccess) {
        return ep->err;
    }
    retry_pending(ep);
    for (int round = 0; round < NETOFI_CQ_ROUNDS; round++) {
        ssize_t n = fi_cq_read(ep->cq, cqe, NETOFI_CQ_BATCH);

        if (n == -FI_EAGAIN) {
            break;
        }
        if (n == -FI_EAVAIL) {
            read_cq_error(ep);
            continue;
        }
        if (n < 0) {
            warn_fi(ep, "fi_cq_read", (int)n);
            ep->err = ncclSystemError;
            break;
        }
        /* The op_context is the fi_context2 at the start of our request. */
        for (ssize_t i = 0; i < n; i++) {
            netofi_data_complete(ep, (netofi_req_t *)cqe[i].op_context, cqe[i].len);
        }
        if (n < NETOFI_CQ_BATCH) {
            break;
        }
    }
    /* Completions may have queued follow-up chunks; give them a chance right away. */
    retry_pending(ep);
    return ep->err;
}

static size_t av_slot(const netofi_ep_t *ep, uint32_t hash, const uint8_t *name, size_t len)
{
    size_t mask = ep->av_cap - 1, i = hash & mask;

    while (ep->av_cache[i].len != 0 &&
           !(ep->av_cache[i].hash == hash && ep->av_cache[i].len == len &&
             memcmp(ep->av_cache[i].name, name, len) == 0)) {
        i = (i + 1) & mask;
    }
    return i;
}

static ncclResult_t av_grow(netofi_ep_t *ep)
{
    netofi_av_entry_t *old = ep->av_cache;
    size_t old_cap = ep->av_cap;
    netofi_av_entry_t *cache = calloc(old_cap * 2, sizeof(*cache));

    if (cache == NULL) {
        BR_WARN(NCCL_NET, "net-ofi: out of memory for the address cache");
        return ncclSystemError;
    }
    ep->av_cache = cache;
    ep->av_cap = old_cap * 2;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].len != 0) {
            ep->av_cache[av_slot(ep, old[i].hash, old[i].name, old[i].len)] = old[i];
        }
    }
    free(old);
    return ncclSuccess;
}

ncclResult_t netofi_ep_addr(netofi_ep_t *ep, const uint8_t *name, size_t len, fi_addr_t *addr_p)
{
    uint32_t hash = netofi_hash(name, len);
    netofi_av_entry_t *e;
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    int rc;

    if (len == 0 || len > NETOFI_NAME_MAX) {
        BR_WARN(NCCL_NET, "net-ofi: peer address of %zu bytes is invalid", len);
        return ncclInternalError;
    }
    e = &ep->av_cache[av_slot(ep, hash, name, len)];
    if (e->len != 0) {
        *addr_p = e->addr;
        return ncclSuccess;
    }
    rc = fi_av_insert(ep->av, name, 1, &addr, 0, NULL);
    if (rc != 1) {
        warn_fi(ep, "fi_av_insert", rc < 0 ? rc : -FI_EINVAL);
        return ncclSystemError;
    }
    if ((ep->av_count + 1) * 2 > ep->av_cap && av_grow(ep) != ncclSuccess) {
        *addr_p = addr; /* usable, just not cached */
        return ncclSuccess;
    }
    e = &ep->av_cache[av_slot(ep, hash, name, len)];
    e->hash = hash;
    e->len = (uint16_t)len;
    memcpy(e->name, name, len);
    e->addr = addr;
    ep->av_count++;
    *addr_p = addr;
    return ncclSuccess;
}

ncclResult_t netofi_ep_id_alloc(netofi_ep_t *ep, uint32_t *id_p)
{
    const uint32_t nids = 1u << NETOFI_ID_BITS;

    for (uint32_t n = 0; n < nids; n++) {
        uint32_t id = (ep->next_id + n) & (nids - 1);
        if (!(ep->ids[id / 32] & (1u << (id % 32)))) {
            ep->ids[id / 32] |= 1u << (id % 32);
            ep->next_id = (id + 1) & (nids - 1);
            *id_p = id;
            return ncclSuccess;
        }
    }
    BR_WARN(NCCL_NET, "net-ofi: all %u connection ids of an endpoint on %s are in use", nids,
            ep->dev->name);
    return ncclSystemError;
}

void netofi_ep_id_free(netofi_ep_t *ep, uint32_t id)
{
    ep->ids[id / 32] &= ~(1u << (id % 32));
}

ncclResult_t netofi_ep_mr_reg(netofi_ep_t *ep, void *buf, size_t len, struct fid_mr **mr_p)
{
    struct fid_mr *mr = NULL;
    uint64_t key = ep->dev->mr_prov_key ? 0 : ep->next_mr_key++;
    int rc = fi_mr_reg(ep->domain, buf, len, FI_SEND | FI_RECV, 0, key, 0, &mr, NULL);

    if (rc != 0) {
        warn_fi(ep, "fi_mr_reg", rc);
        return ncclSystemError;
    }
    if (ep->dev->mr_endpoint) {
        rc = fi_mr_bind(mr, &ep->ep->fid, 0);
        if (rc == 0) {
            rc = fi_mr_enable(mr);
        }
        if (rc != 0) {
            warn_fi(ep, "binding a memory registration to the endpoint", rc);
            fi_close(&mr->fid);
            return ncclSystemError;
        }
    }
    *mr_p = mr;
    return ncclSuccess;
}
