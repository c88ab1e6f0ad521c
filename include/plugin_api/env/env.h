/* SPDX-License-Identifier: Apache-2.0 */
/* Every env plugin ABI version Braid knows; ncclEnvPlugin_t names the newest. */
#ifndef BRAID_PLUGIN_API_ENV_H_
#define BRAID_PLUGIN_API_ENV_H_

#include "env_v1.h"
#include "env_v2.h"

typedef ncclEnvPlugin_v2_t ncclEnvPlugin_t;

#endif /* BRAID_PLUGIN_API_ENV_H_ */
