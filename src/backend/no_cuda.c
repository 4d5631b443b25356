/* SPDX-License-Identifier: MIT */
/* A libqkv built without CUDA (make CUDA=1 builds backend/cuda.c instead of this file): no
 * GPU to move a model to, which qkv_transformer_set_device and qkv_device_check say. */
#include "backend/backend.h"

const device *device_cuda(void) { return NULL; }
