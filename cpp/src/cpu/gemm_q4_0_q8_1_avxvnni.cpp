// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_avxvnni.cpp: the AVX-VNNI Q4_0 x Q8_1 kernels
// (cpu_avx_vnni, cpu_avx_vnni_panel) for CPUs with VEX-encoded vpdpbusd
// (Intel client cores from Alder Lake on; where AVX-512 VNNI is there too,
// its kernels are tried first), compiled with -mavx2 -mfma -mf16c -mavxvnni where
// the compiler has it (cpp/CMakeLists.txt) and registered with an arch
// window that needs avx_vnni (registry.cpp). The kernels are the AVX2 ones,
// gemm_q4_0_q8_1_avx2_body.h, with vpdpbusd making each block's int32 sums.
#include "cpu/gemm_q4_0_q8_1_simd.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVXVNNI__)
#define QG_Q4_AVX2_VNNI 1
#include "cpu/gemm_q4_0_q8_1_avx2_body.h"

namespace qg::detail::cpu::q4q8 {

extern const PanelKernels kAvxVnniPanel = panel_kernels();
extern const TileKernels kAvxVnniTiles = tile_kernels();

}  // namespace qg::detail::cpu::q4q8

#else  // not compiled for AVX-VNNI (a non-x86 host or a compiler without -mavxvnni):
       // the entry points say so and its can_run refuses

namespace qg::detail::cpu::q4q8 {
extern const TileKernels kAvxVnniTiles = {};
extern const PanelKernels kAvxVnniPanel = {};
}  // namespace qg::detail::cpu::q4q8

#endif
