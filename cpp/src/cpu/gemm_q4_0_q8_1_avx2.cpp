// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_avx2.cpp: the AVX2 Q4_0 x Q8_1 kernels (cpu_avx2,
// cpu_avx2_panel), compiled with -mavx2 -mfma -mf16c and registered with an
// arch window that needs those (registry.cpp). The kernels themselves are in
// gemm_q4_0_q8_1_avx2_body.h, shared with the AVX-VNNI build of them.
#include "cpu/gemm_q4_0_q8_1_simd.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define QG_Q4_AVX2_VNNI 0
#include "cpu/gemm_q4_0_q8_1_avx2_body.h"

namespace qg::detail::cpu::q4q8 {

extern const PanelKernels kAvx2Panel = panel_kernels();
extern const TileKernels kAvx2Tiles = tile_kernels();

}  // namespace qg::detail::cpu::q4q8

#else  // not compiled for AVX2 (non-x86 host): its arch window keeps it from being chosen

namespace qg::detail::cpu::q4q8 {
extern const TileKernels kAvx2Tiles = {};
extern const PanelKernels kAvx2Panel = {};
}  // namespace qg::detail::cpu::q4q8

#endif
