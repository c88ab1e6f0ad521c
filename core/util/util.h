/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util: the bottom module. Logging and parameters (core/common/log.h, param.h), time,
 * host identity, and allocation helpers. Sockets are in util_socket.h.
 */
#ifndef BR_UTIL_H_
#define BR_UTIL_H_

#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "param.h"

/* Log what loading the parameter table found (non-default values, invalid values,
 * unknown variables). Called once by the logger. */
void br_param_report(void);

/* Monotonic clock in nanoseconds. */
uint64_t br_time_ns(void);
/* The same clock as the kernel last ticked it (CLOCK_MONOTONIC_COARSE): a few ms behind
 * at most and of a tick's resolution, but about 5x cheaper to read; for time stamps of
 * every call that only a state dump reads. Compare it only with itself. */
uint64_t br_time_coarse_ns(void);

/* Identity of this host (NCCL_HOSTID, else host name and boot id) and of this process
 * (pid and pid namespace), as 64-bit hashes. */
uint64_t br_host_hash(void);
/* The machine itself (host name and boot id), whatever NCCL_HOSTID says: ranks with equal
 * values share CPUs even when they pretend to be on different hosts. */
uint64_t br_machine_hash(void);
uint64_t br_pid_hash(void);
/* This process's pid namespace (the inode of /proc/self/ns/pid; 0 if unknown): a pid means
 * the same process to two processes of one machine only when they have equal values. */
uint64_t br_pid_ns(void);
/* Is process pid of this pid namespace known to be gone: no such process, or one that
 * exited and waits to be reaped (a zombie)? 0 when it lives or cannot be told. */
int br_proc_gone(int pid);
/* Who shares this process's POSIX shared memory (/dev/shm): the host identity, the machine
 * and the device /dev/shm lives on. Containers of one host (same host name and boot id)
 * with a /dev/shm of their own get different keys; ranks with equal keys can map each
 * other's shm_open segments (the directory's device and inode are in the key). *dev_p
 * (may be NULL) gets the device, 0 if /dev/shm is missing. */
uint64_t br_shm_key(uint64_t *dev_p);
/* This machine's host name, for error messages. */
const char *br_host_name(void);

/* 64-bit FNV-1a hash of a byte string. */
uint64_t br_hash_bytes(const void *data, size_t size, uint64_t seed);

/* Allocation that logs what failed: *ptr_p gets zeroed memory of n * size bytes. */
ncclResult_t br_calloc_impl(void **ptr_p, size_t n, size_t size, const char *what);
#define br_calloc(ptr_p, n, what) br_calloc_impl((void **)(ptr_p), (n), sizeof(**(ptr_p)), (what))

/* Host memory other processes of the host can map (util_hostmem.c): ncclMemAlloc's host
 * buffers. Where one lies: its allocation's number (unique in the process, never 0),
 * descriptor, the offset in it, and its size. */
typedef struct {
    uint64_t id;
    int32_t fd;
    uint64_t off;
    uint64_t size;
} br_hostmem_ref_t;

/* Allocate size bytes (rounded up to pages) of shareable host memory; logs a failure. */
ncclResult_t br_hostmem_alloc(size_t size, void **ptr_p);
/* Free what br_hostmem_alloc returned; 0 if ptr is not such an allocation. */
int br_hostmem_free(void *ptr);
/* Does [ptr, ptr + bytes) lie in one allocation? 1 and *ref_p filled, else 0. */
int br_hostmem_find(const void *ptr, size_t bytes, br_hostmem_ref_t *ref_p);

/* A name for a POSIX shared memory object this process creates: "/braid-<kind><pid>-
 * <load>-<n>", n counted per process and <load> drawn at random once per load of the
 * library, so that two copies of it in one process (libbraid.so beside libnccl.so.2, each
 * with its own counter) never make the same name. kind is "", "arena-" or "ipc-". */
void br_shm_name(char *buf, size_t len, const char *kind);

/* Create the POSIX shared memory object `name` (O_CREAT | O_EXCL, mode 0600) and return its
 * descriptor, or -1 with errno set. Names from br_shm_name are the process's own: one that
 * already exists was left by a process that died with the same id and drew the same load
 * number (a killed job), so it is unlinked (logged) and the creation tried once more
 * instead of failing the job. */
int br_shm_create_own(const char *name);

/* Copy n bytes with non-temporal stores (util_copy.c): for outputs too large to stay in
 * the cache, where they save the read of every destination line; memcpy where the CPU
 * has none. Ordered before later stores (a flag another rank acquires). */
void br_copy_stream(void *dst, const void *src, size_t n);
/* br_copy_stream when `stream` is set, else memcpy. */
void br_copy_out(void *dst, const void *src, size_t n, int stream);
/* Size of the last-level cache CPU 0 uses (0: unknown), how many CPUs share it (0:
 * unknown) and where that was read ("sysfs", else "sysconf"); read once per process. */
size_t br_llc_size(int *ncpus_p, const char **source_p);

/* Fill buf with size bytes from the kernel's random source. */
ncclResult_t br_random_bytes(void *buf, size_t size);

#endif /* BR_UTIL_H_ */
