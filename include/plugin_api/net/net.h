/* SPDX-License-Identifier: Apache-2.0 */
/* Every net plugin ABI version Braid knows; ncclNet_t names the newest. */
#ifndef BRAID_PLUGIN_API_NET_H_
#define BRAID_PLUGIN_API_NET_H_

#include "net_v6.h"
#include "net_v7.h"
#include "net_v8.h"
#include "net_v9.h"
#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"

typedef ncclNet_v12_t ncclNet_t;
typedef ncclNetProperties_v12_t ncclNetProperties_t;
typedef ncclNetDeviceHandle_v12_t ncclNetDeviceHandle_t;
typedef ncclNetCommConfig_v12_t ncclNetCommConfig_t;

#endif /* BRAID_PLUGIN_API_NET_H_ */
