/* SPDX-License-Identifier: Apache-2.0 */
/* Empty: NVIDIA's nccl.h includes it; nothing of it is used (link_nv232.sh). */
