/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A build without a CUDA compiler carries no kernels: an empty fatbin, and the host side
 * reports that device buffers cannot be used with this build.
 */
#include "device.h"

const unsigned char br_dev_fatbin[1] = {0};
const size_t br_dev_fatbin_size = 0;
