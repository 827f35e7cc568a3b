// SPDX-License-Identifier: MIT
// qg/qg.h: the umbrella header for C++ users of the qg core.
#pragma once

#include "qg/formats.h"
#include "qg/int_ops.h"
#include "qg/ops.h"
#include "qg/runtime.h"
#include "qg/status.h"
#include "qg/tensor.h"

#define QG_VERSION_MAJOR 0
#define QG_VERSION_MINOR 1
#define QG_VERSION_PATCH 0
