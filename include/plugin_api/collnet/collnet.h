/* SPDX-License-Identifier: Apache-2.0 */
/* Every collnet plugin ABI version Braid knows; ncclCollNet_t names the newest. */
#ifndef BRAID_PLUGIN_API_COLLNET_H_
#define BRAID_PLUGIN_API_COLLNET_H_

#include "collnet_v10.h"
#include "collnet_v11.h"
#include "collnet_v12.h"
#include "collnet_v8.h"
#include "collnet_v9.h"

typedef ncclCollNet_v12_t ncclCollNet_t;
typedef ncclNetSGE_v12_t ncclNetSGE_t;

#endif /* BRAID_PLUGIN_API_COLLNET_H_ */
