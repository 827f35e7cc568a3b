// SPDX-License-Identifier: MIT
// status.cpp: names of status codes, for messages and the Python exception map.
#include "qg/status.h"

namespace qg {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::type_error: return "type_error";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::overflow: return "overflow";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::backend_unavailable: return "backend_unavailable";
    case StatusCode::cuda_error: return "cuda_error";
    case StatusCode::out_of_memory: return "out_of_memory";
  }
  return "unknown";
}

}  // namespace qg
