/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernels' fatbin, built by nvcc at BR_DEV_FATBIN_PATH (core/device/CMakeLists.txt),
 * embedded as read-only data by the assembler. 16-byte alignment: the driver reads the
 * fatbin's headers in place. The symbols stay hidden inside the library.
 */
#include "device.h"

#ifndef BR_DEV_FATBIN_PATH
#error "BR_DEV_FATBIN_PATH names the fatbin to embed"
#endif

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl br_dev_fatbin\n"
        ".hidden br_dev_fatbin\n"
        ".type br_dev_fatbin, %object\n"
        "br_dev_fatbin:\n"
        ".incbin \"" BR_DEV_FATBIN_PATH "\"\n"
        "br_dev_fatbin_end:\n"
        ".byte 0\n" /* keeps the end label inside the section */
        ".balign 8\n"
        ".globl br_dev_fatbin_size\n"
        ".hidden br_dev_fatbin_size\n"
        ".type br_dev_fatbin_size, %object\n"
        "br_dev_fatbin_size:\n"
        ".quad br_dev_fatbin_end - br_dev_fatbin\n"
        ".previous\n");
