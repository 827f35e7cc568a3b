// SPDX-License-Identifier: MIT
// bench/cases_read_floor.cpp: the read floor of the decode GEMMs. For each
// shape and weight format with a GEMM case, a kernel that only reads the
// weight bytes (read_floor.cu), on the same rotation of the same buffers and
// timed as the GEMMs are:
//   read_<format>/cuda/<cold|hot>/M:<M>/K:<K>/manual_time
// At N <= 8 a GEMM reads little more than its weights, so time(read) /
// time(GEMM) is the share of the achievable it reaches; %floor (bytes / the
// copy bandwidth) leaves out the launch and ramp that every call pays.
#include <string>

#include "harness.h"

namespace qgbench {

namespace {

void bm_read(benchmark::State& st, qg::Format format, int64_t m, int64_t k, bool cold) {
  const Backend be = Backend::cuda;
  RotationPtr w;
  std::string err = packed_rows(be, "w", format, m, k, &w);
  if (err.empty()) err = w->prepare(cold);
  if (!err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  const int64_t bytes = m * qg::row_bytes(qg::format_traits(format), k);
  const Work work{0.0, double(bytes)};
  run_timed(st, be, work, warmups_for(be, *w, cold), [&]() { return gpu_read_floor(w->take(cold), bytes); });
}

}  // namespace

void add_read_floor_cases(CaseList& cases) {
  const Backend be = Backend::cuda;
  if (qg::detail::cuda::registry().gemm.empty()) return;  // CUDA not built
  for (const Shape& s : g_opt.shapes)
    for (qg::Format f : {qg::Format::q4_0, qg::Format::i8, qg::Format::i4})
      for (bool cold : {true, false}) {
        const int64_t m = s.m, k = s.k;
        const std::string name = std::string("read_") + qg::format_traits(f).name + "/" + backend_name(be) + "/" +
                                 (cold ? "cold" : "hot") + "/M:" + std::to_string(m) + "/K:" + std::to_string(k);
        cases.push_back({name, be, [=](benchmark::State& st) { bm_read(st, f, m, k, cold); }, nullptr});
      }
}

}  // namespace qgbench
