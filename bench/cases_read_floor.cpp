// SPDX-License-Identifier: MIT
// bench/cases_read_floor.cpp: the read floor of the decode GEMMs. For each
// shape and weight format with a GEMM case, code that only reads the weight
// bytes (on the GPU a kernel, read_floor.cu; on the CPU the GEMMs' thread
// pool), on the same rotation of the same buffers and timed as the GEMMs are:
//   read_<format>/cuda/<cold|hot>/M:<M>/K:<K>/manual_time
//   read_<format>/cpu/<cold|hot>/M:<M>/K:<K>
// At N <= 8 a GEMM reads little more than its weights, so time(read) /
// time(GEMM) is the share of the achievable it reaches; %floor (bytes / the
// copy bandwidth) leaves out the launch and ramp that every call pays.
#include <string>

#include "harness.h"

namespace qgbench {

namespace {

void bm_read(benchmark::State& st, Backend be, qg::Format format, int64_t m, int64_t k, bool cold) {
  RotationPtr w;
  std::string err = packed_rows(be, "w", format, m, k, &w);
  if (err.empty()) err = w->prepare(cold);
  if (!err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  const int64_t bytes = m * qg::row_bytes(qg::format_traits(format), k);
  const Work work{0.0, double(bytes)};
  run_timed(st, be, work, warmups_for(be, *w, cold), [&]() {
    return be == Backend::cuda ? gpu_read_floor(w->take(cold), bytes) : cpu_read_floor(w->take(cold), bytes);
  });
}

}  // namespace

void add_read_floor_cases(CaseList& cases) {
  for (Backend be : {Backend::cpu, Backend::cuda}) {
    if (be == Backend::cuda && qg::detail::cuda::registry().gemm.empty()) continue;  // CUDA not built
    for (const Shape& s : g_opt.shapes)
      for (qg::Format f : {qg::Format::q4_0, qg::Format::i8, qg::Format::i4})
        for (bool cold : {true, false}) {
          const int64_t m = s.m, k = s.k;
          const std::string name = std::string("read_") + qg::format_traits(f).name + "/" + backend_name(be) + "/" +
                                   (cold ? "cold" : "hot") + "/M:" + std::to_string(m) + "/K:" + std::to_string(k);
          cases.push_back({name, be, [=](benchmark::State& st) { bm_read(st, be, f, m, k, cold); }, nullptr});
        }
  }
}

}  // namespace qgbench
