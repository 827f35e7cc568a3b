// SPDX-License-Identifier: MIT
// qg/status.h: the result every qg entry point returns instead of throwing.
#pragma once

#include <string>
#include <utility>

namespace qg {

// Codes map one-to-one onto the Python exceptions the bindings raise, so a C++
// caller and a Python caller see the same classification of a failure.
enum class StatusCode {
  ok = 0,
  type_error,         // wrong dtype or array kind          -> TypeError
  invalid_argument,   // wrong shape, value, layout, device  -> ValueError
  overflow,           // a 32/64-bit limit would be passed   -> OverflowError
  unsupported,        // no implementation for this device   -> NotImplementedError
  backend_unavailable,// backend not built or no device      -> RuntimeError
  cuda_error,         // the CUDA runtime reported an error  -> RuntimeError
  out_of_memory,      // an allocation failed                -> MemoryError
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status success() { return {}; }
  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

const char* status_code_name(StatusCode code);

}  // namespace qg
