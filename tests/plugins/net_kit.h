/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net_kit: load any net plugin .so and call it through one version-independent surface
 * (NCCL v12 semantics), for the conformance suite and the throughput benchmark. It
 * probes ncclNetPlugin_v12, then _v11, then _v10 (or only the version asked for).
 * Not thread-safe: one kit per process, driven by one thread.
 */
#ifndef NET_KIT_H_
#define NET_KIT_H_

#include <stddef.h>

#include "plugin_api/net/net.h"

/* Load the plugin at path; version 0 probes newest first, else only that version.
 * Returns 0, or -1 with a message in err. */
int kit_load(const char *path, int version, char *err, size_t errlen);
/* The version found (12, 11 or 10), its symbol and the plugin's name. */
int kit_version(void);
const char *kit_symbol(void);
const char *kit_name(void);

/* init (per communicator for v11/v12, process-wide for v10) and finalize. */
ncclResult_t kit_init(void);
void kit_fini(void);

/* The WARN lines the kit's logger saw since the last kit_warn_reset(), newest last. */
int kit_warn_count(void);
const char *kit_warn_text(void); /* every WARN line since the reset, '\n'-separated */
void kit_warn_reset(void);
/* Print INFO lines too (WARN lines are always printed). */
void kit_set_verbose(int verbose);

ncclResult_t kit_devices(int *ndev);
/* Properties in the v12 layout, whatever the version (older fields defaulted). */
ncclResult_t kit_properties(int dev, ncclNetProperties_v12_t *props);
ncclResult_t kit_listen(int dev, void *handle, void **listen_comm);
ncclResult_t kit_connect(int dev, void *handle, void **send_comm);
ncclResult_t kit_accept(void *listen_comm, void **recv_comm);
ncclResult_t kit_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t kit_dereg_mr(void *comm, void *mhandle);
ncclResult_t kit_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                       void **request);
ncclResult_t kit_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                       void **mhandles, void **request);
ncclResult_t kit_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                        void **request);
ncclResult_t kit_test(void *request, int *done, int *sizes);
ncclResult_t kit_close_send(void *send_comm);
ncclResult_t kit_close_recv(void *recv_comm);
ncclResult_t kit_close_listen(void *listen_comm);

/* Seconds on the monotonic clock. */
double kit_now(void);

#endif /* NET_KIT_H_ */
