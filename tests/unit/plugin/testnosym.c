/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A library that is no net plugin Braid can load: without TESTNOSYM_V7 it exports no
 * ncclNetPlugin_* symbol at all; with it, only an (unusable) ncclNetPlugin_v7, a version
 * NCCL still loads but Braid does not.
 */
#define EXPORT __attribute__((visibility("default")))

EXPORT int testnosym_marker = 1;

#ifdef TESTNOSYM_V7
/* 19 slots of an ncclNet_v7_t; never called, since v7 is not probed. */
EXPORT const void *const ncclNetPlugin_v7[19] = {"OldNet"};
#endif
