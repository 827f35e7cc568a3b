// SPDX-License-Identifier: MIT
// cuda/ring_forms.h: the CTA forms of the tensor-core ring GEMVs
// (cuda_gemv_mma for Q4_0, cuda_wo_gemv_mma for INT4 weight-only): a warp
// streams its slice of K of one row group through its own cp.async ring and
// a CTA is one row group. What they share is here: the form type (warps a
// CTA, CTAs an SM) and the shared-memory padding that holds an SM to its
// CTAs; each kernel's file keeps its table of forms and its pick rule.
// Host code only.
#pragma once

#include <algorithm>

namespace qg::detail::cuda {

// A CTA form: n8 tiles (tokens / 8), m16 tiles (rows / 16), warps a CTA,
// CTAs an SM.
struct CtaForm {
  int nt, rt, w, ctas;
};
constexpr bool operator==(const CtaForm& a, const CtaForm& b) {
  return a.nt == b.nt && a.rt == b.rt && a.w == b.w && a.ctas == b.ctas;
}

// sm_90 has 228 KiB of shared memory an SM, of which each CTA takes 1 KiB
// for itself.
constexpr int kSmemPerSm = 228 * 1024, kSmemPerCta = 1024;
// Within one wave of row groups a ring CTA asks for at least this much:
// more than half of an SM's shared memory less a CTA's 1 KiB, so that no SM
// takes two. Without it, launched early behind linear_q4_0's quantizer,
// cuda_gemv_mma took 18.5-21.8 us in a CUDA graph on an H200 at
// 4096 x 14336 N = 1..8, against 11.8-13.3 with it (docs/architecture.md;
// the reading, not profiled: some SMs took two of the 128 CTAs while the
// quantizer's held others). Past one wave the padding is to 1 / ctas.
constexpr int kOneCtaAnSmBytes = 114 * 1024;

// The dynamic shared memory a CTA of `own` bytes asks for so that at most
// `ctas` of it share an SM (its own bytes where those are already more).
constexpr int ring_launch_smem(int own, int ctas) {
  const int padded = ctas == 1 ? kOneCtaAnSmBytes : (kSmemPerSm / ctas - kSmemPerCta) & ~127;
  return std::max(own, padded);
}
// What a form's instance asserts about ring_launch_smem: `ctas` fit an SM
// and one more does not.
constexpr bool ring_ctas_fit_exactly(int own, int ctas) {
  const int smem = ring_launch_smem(own, ctas);
  return ctas * (smem + kSmemPerCta) <= kSmemPerSm && (ctas + 1) * (smem + kSmemPerCta) > kSmemPerSm;
}

}  // namespace qg::detail::cuda
