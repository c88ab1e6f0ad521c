/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the check_netofi*.c files, which make one Check binary: the plugin loaded from
 * the path main() was given, the fixture that initializes it, the logger that collects its
 * WARN lines, and the connection and transfer helpers several files use. Every helper
 * asserts (ck_assert) on the test's thread; none is safe to call from another thread.
 */
#ifndef BR_NETOFI_TEST_UTIL_H_
#define BR_NETOFI_TEST_UTIL_H_

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "plugin_api/net/net.h"

#define NT_TEST_TIMEOUT 120  /* tcase_set_timeout of every test case */
#define NT_POLL_SECONDS 60.0 /* how long a polling loop waits for progress */
#define NT_NSIZES 5

/* The plugin library's path (argv[1]); set by main() before the runner starts. */
extern const char *nt_plugin_path;
/* The v12 table and the context nt_setup() opened (NULL once nt_teardown() closed it). */
extern const ncclNet_v12_t *nt_net;
extern void *nt_ctx;
/* Every WARN the plugin logged, newline separated; tests clear it before a step. */
extern char nt_warn[8192];
/* The message sizes the data tests send: 0, 1, 4097, 1 MiB and 64 MiB. */
extern const size_t nt_sizes[NT_NSIZES];

/* One connection: listen on rctx, connect from sctx. */
typedef struct {
    void *lc, *sc, *rc;
} nt_pair_t;

/* The logger given to init: appends WARN lines to nt_warn (and prints them); INFO goes to
 * stderr only when NETOFI_TEST_VERBOSE is set. */
void nt_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
               const char *fmt, ...);

/* Monotonic time in seconds. */
double nt_now(void);

/* The symbol name of the plugin (dlopen'd on first use, never closed); NULL if absent. */
void *nt_sym(const char *name);

/* Fixture: ncclNetPlugin_v12 into nt_net, init into nt_ctx, at least one device. */
void nt_setup(void);

/* Fixture: finalize nt_ctx if it is open. */
void nt_teardown(void);

/* Open *p: listen on rctx, then connect from sctx and accept until both ends exist
 * (connect_first: connect until it returns a comm before the first accept). */
void nt_pair_open(const ncclNet_v12_t *net, void *sctx, void *rctx, nt_pair_t *p,
                  int connect_first);

/* Close the three comms of p. */
void nt_pair_close(const ncclNet_v12_t *net, nt_pair_t *p);

/* Fill n bytes with a pattern that depends on seed. */
void nt_fill(uint8_t *buf, size_t n, unsigned seed);

/* Send size bytes into a receive of capacity cap, polling both; returns the receive's
 * result and its reported size. */
ncclResult_t nt_xfer(const ncclNet_v12_t *net, nt_pair_t *p, void *sbuf, size_t size, void *rbuf,
                     size_t cap, int *rsize_p);

/* Transfer size bytes (receive capacity size + extra) and check them byte by byte. */
void nt_check_xfer(const ncclNet_v12_t *net, nt_pair_t *p, size_t size, size_t extra);

/* Each file's test cases, added to the one suite main() runs. */
void nt_add_connect_tcases(Suite *s);
void nt_add_procs_tcases(Suite *s);
void nt_add_data_tcases(Suite *s);
void nt_add_failure_tcases(Suite *s);

#endif /* BR_NETOFI_TEST_UTIL_H_ */
