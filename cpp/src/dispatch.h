// SPDX-License-Identifier: MIT
// dispatch.h: pick the first implementation whose can_run agrees, for the
// backend that owns the arguments' device, and say why the others did not.
#pragma once

#include <string>
#include <vector>

#include "backend.h"
#include "qg/ops.h"

namespace qg::detail {

// Calls can_run(impl, &why) on each impl in order. Returns the chosen index in
// *chosen (or -1) and, when explain is set, fills it with one line per impl.
template <class Impl, class CanRun>
Status choose_impl(const std::string& fn, Device device, const std::vector<Impl>& impls,
                   CanRun can_run, int* chosen, Explanation* explain) {
  *chosen = -1;
  if (explain) explain->op = fn;
  if (device.type == DeviceType::cuda && !cuda::built())
    return Status(StatusCode::backend_unavailable,
                  fn + ": the input is on " + device_name(device) +
                      " but this qg build has no CUDA backend (reinstall with nvcc on PATH, e.g. "
                      "QG_CUDA=ON pip install .)");
  std::string reasons;
  for (size_t i = 0; i < impls.size(); ++i) {
    std::string why;
    const bool ok = *chosen < 0 && can_run(impls[i], &why);
    if (ok) *chosen = static_cast<int>(i);
    if (explain) {
      std::string line = std::string(impls[i].name) + ": ";
      if (ok) line += "chosen";
      else if (*chosen >= 0 && static_cast<int>(i) != *chosen) line += "not tried (an earlier one was chosen)";
      else line += "skipped (" + why + ")";
      explain->candidates.push_back(line);
      if (ok) explain->chosen = impls[i].name;
    }
    if (!ok && *chosen < 0) reasons += std::string(reasons.empty() ? "" : "; ") + impls[i].name + ": " + why;
  }
  if (*chosen < 0 && device.type == DeviceType::cuda) {
    std::string why;
    if (cuda::devices(&why).empty())
      return Status(StatusCode::backend_unavailable,
                    fn + ": the input is on " + device_name(device) + " but no CUDA device is usable (" +
                        why + ")");
  }
  if (*chosen < 0)
    return Status(StatusCode::unsupported,
                  fn + ": no implementation for this problem on " + device_name(device) +
                      (reasons.empty() ? std::string() : " (" + reasons + ")"));
  return {};
}

}  // namespace qg::detail
