// SPDX-License-Identifier: MIT
// dispatch.h: one dispatcher for every op and backend. It takes the registry
// of the backend that owns the arguments' device, keeps the kernels that serve
// the call's formats, and runs the first one whose arch window admits the
// device, whose epilogue capabilities cover the call, and whose can_run
// agrees. With an Explanation it records why each candidate was passed over.
// Nothing here builds a string on the success path of a real call.
#pragma once

#include <string>
#include <vector>

#include "backend.h"
#include "qg/ops.h"

namespace qg::detail {

// What the arguments' device offers, looked up once per call.
struct DeviceCaps {
  int cc = 0;                 // CUDA compute capability
  uint32_t cpu_features = 0;  // CPU ISA bits
};

// The call's device, current for the calling thread while the scope lives:
// the CUDA kernels' can_run (occupancy queries, shared-memory attributes)
// and run (launches, workspaces) act on the current device. ops.cpp and
// linear.cpp open one a call, so that no kernel selects a device itself;
// the caller's device is put back at the end. On the CPU it does nothing.
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  // Success, or "<fn> (cuda): cannot select cuda:N: <CUDA's error>".
  Status status(const char* fn) const;
  // Before a walk of a table: success, or why the device cannot be used,
  // device_caps' reason first (no such GPU, no code for it) and the failed
  // selection otherwise. No can_run may run on another device: their
  // occupancy answers are cached per device.
  Status ready(const char* fn) const;

 private:
  int device_ = -1;
  int previous_ = -1;
  std::string why_;  // empty: selected (or nothing to select)
};

// Fails with the reason a device cannot run anything (no CUDA backend, no
// such GPU, no code for it in this build).
Status device_caps(const char* fn, Device device, DeviceCaps* caps);
const Registry& registry_for(Device device);

// True when the window admits the device; else *why_not (if given) says why.
bool arch_admits(const ArchWindow& w, Device device, const DeviceCaps& caps, std::string* why_not);

inline bool serves(const GemmKernel& k, const GemmArgs& a) {
  return k.a_format == a.a.format && k.b_format == a.b.format;
}
inline uint32_t caps_missing(const GemmKernel& k, const GemmArgs& a) {
  return epilogue_needs(a) & ~k.epilogue_caps;
}
template <class Args>
bool serves(const ConvertKernel<Args>& k, const Args& a) {
  return (k.formats & format_bit(a.format)) != 0;
}
template <class Args>
uint32_t caps_missing(const ConvertKernel<Args>&, const Args&) {
  return 0;
}

// "q4_0 x q8_1 on cuda:0" / "q4_0 on cpu"
std::string call_key(const GemmArgs& a);
std::string call_key(const QuantizeArgs& a);
std::string call_key(const DequantizeArgs& a);

Status no_kernel(const char* fn, const std::string& key, const std::string& reasons, bool any_served);

// The dispatcher's judgement of one kernel that serves the call's formats:
// its arch window, its epilogue capabilities, then its can_run. why_not may
// be null: then no reason is built (the success path builds no strings).
template <class Kernel, class Args>
bool kernel_admits(const Kernel& k, const Args& args, const DeviceCaps& caps, std::string* why_not) {
  if (!arch_admits(k.arch, args.device, caps, why_not)) return false;
  if (const uint32_t missing = caps_missing(k, args)) {
    if (why_not) *why_not = "its epilogue lacks " + epilogue_cap_names(missing);
    return false;
  }
  return k.can_run(args, why_not);
}

// Runs the walk once without building any reason; only an explain request or
// a failure (no kernel admits the call) walks again to say why.
template <class Kernel, class Args>
Status choose_kernel(const char* fn, const std::vector<Kernel>& kernels, const Args& args,
                     const Kernel** chosen, Explanation* explain) {
  *chosen = nullptr;
  DeviceCaps caps;
  if (Status s = device_caps(fn, args.device, &caps); !s.ok()) return s;
  if (!explain) {
    for (const Kernel& k : kernels)
      if (serves(k, args) && kernel_admits(k, args, caps, nullptr)) {
        *chosen = &k;
        return {};
      }
  } else {
    explain->op = fn;
    explain->problem = call_key(args);
  }
  bool any_served = false;
  std::string reasons;
  for (const Kernel& k : kernels) {
    if (!serves(k, args)) continue;
    any_served = true;
    if (*chosen) {
      if (explain) explain->candidates.push_back(std::string(k.name) + ": not tried (an earlier one was chosen)");
      continue;
    }
    std::string why;
    if (kernel_admits(k, args, caps, &why)) {  // with explain only: the silent walk found none otherwise
      *chosen = &k;
      if (explain) {
        explain->chosen = k.name;
        explain->candidates.push_back(std::string(k.name) + ": chosen");
      }
      continue;
    }
    if (explain) explain->candidates.push_back(std::string(k.name) + ": skipped (" + why + ")");
    reasons += (reasons.empty() ? "" : "; ") + std::string(k.name) + ": " + why;
  }
  if (*chosen) return {};
  return no_kernel(fn, call_key(args), reasons, any_served);
}

}  // namespace qg::detail
