// SPDX-License-Identifier: MIT
// registry.cpp: the CPU backend's kernel tables, most specialised first.
// The ISA a kernel needs is data (its arch window); can_run judges only
// shape and alignment: every CPU kernel takes any alignment, and the AVX2
// integer kernels need K-contiguous operands (and the weight-only one K and
// groups in multiples of 32), leaving the rest to the reference kernels; an
// int8 pair with an operand strided along K is first repacked
// (cpu_i8_repacked) and then runs on the int8 kernels.
#include "backend.h"
#include "cpu/kernels.h"

namespace qg::detail::cpu {

namespace {

template <class Args>
bool any_shape(const Args&, std::string*) {
  return true;
}

// The AVX2 integer kernels load rows along K: both operands K-contiguous
// (an int8 [K, N] B is repacked first by cpu_i8_repacked, an INT4 one is
// served by the reference kernel).
bool k_contiguous(const GemmArgs& g, std::string* why_not) {
  for (const Operand* op : {&g.a, &g.b}) {
    if (!contiguous_along_k(*op)) {
      if (why_not)
        *why_not = std::string(op == &g.a ? "a" : "b") + " is not contiguous along K (block stride " +
                   std::to_string(op->block_stride) + " bytes)";
      return false;
    }
  }
  return true;
}

bool i8_avx2_can_run(const GemmArgs& g, std::string* why_not) { return k_contiguous(g, why_not); }

// The decode kernel streams A once against up to four rows of B held in
// registers and passes over it again from L2 for each further four, up to
// kI8VnniMaxN (kernels.h); wider calls go to cpu_i8_avx2's cache tiles.
bool i8_avx512vnni_can_run(const GemmArgs& g, std::string* why_not) {
  if (g.b.rows > kI8VnniMaxN) {
    if (why_not) *why_not = "N=" + std::to_string(g.b.rows) + " is above its " + std::to_string(kI8VnniMaxN);
    return false;
  }
  return k_contiguous(g, why_not);
}

// Tiles of 16 rows of B: below kI8AmxMinN most of each would be padding, and
// the decode kernels stream A faster.
bool i8_amx_can_run(const GemmArgs& g, std::string* why_not) {
  if (!k_contiguous(g, why_not)) return false;
  if (g.b.rows < kI8AmxMinN) {
    if (why_not) *why_not = "N=" + std::to_string(g.b.rows) + " is below its " + std::to_string(kI8AmxMinN);
    return false;
  }
  return true;
}

// 32 codes (16 bytes) per step, and a group's sum made whole before its scale.
bool wo_avx2_can_run(const GemmArgs& g, std::string* why_not) {
  if (g.a.k % 32 != 0 || g.a.scales.group_size % 32 != 0) {
    if (why_not)
      *why_not = "K=" + std::to_string(g.a.k) + " and group_size=" + std::to_string(g.a.scales.group_size) +
                 " must be multiples of 32";
    return false;
  }
  return k_contiguous(g, why_not);
}

// One token (further rows of activations would each redo the integer work
// that cpu_wo_avx2 shares between four); 64 codes a 32-byte load, a
// chunk's two 32-blocks in one group or in one each: groups of 32 or a
// multiple of 64.
bool wo_avx2_fixed_can_run(const GemmArgs& g, std::string* why_not) {
  const int64_t gs = g.a.scales.group_size;
  if (g.b.rows != 1) {
    if (why_not) *why_not = "N=" + std::to_string(g.b.rows) + ": it takes one row of activations (N=1)";
    return false;
  }
  if (g.a.k % 32 != 0 || !(gs == 32 || (gs > 0 && gs % 64 == 0))) {
    if (why_not)
      *why_not = "needs K a multiple of 32 and group_size 32 or a multiple of 64 (K=" + std::to_string(g.a.k) +
                 ", group_size=" + std::to_string(gs) + ")";
    return false;
  }
  return k_contiguous(g, why_not);
}

// One 64-byte load holds 128 codes; every 8-code lane must lie in one group,
// and a chunk's groups must be loadable together: groups of 32 or 64 codes,
// or a multiple of 128.
bool wo_avx512_can_run(const GemmArgs& g, std::string* why_not) {
  const int64_t gs = g.a.scales.group_size;
  if (g.a.k % 32 != 0 || !(gs == 32 || gs == 64 || (gs > 0 && gs % 128 == 0))) {
    if (why_not)
      *why_not = "needs K a multiple of 32 and group_size 32, 64 or a multiple of 128 (K=" + std::to_string(g.a.k) +
                 ", group_size=" + std::to_string(gs) + ")";
    return false;
  }
  return k_contiguous(g, why_not);
}

constexpr ArchWindow kAnyCpu{};
constexpr ArchWindow kAvx2{0, 0, false, kCpuAvx2 | kCpuFma | kCpuF16c};
// kCpuAvx512Vnni stands for AVX-512 F + BW + VL + VNNI with ZMM state saved by
// the OS (features.cpp); its driver is compiled for AVX2, hence those too.
constexpr ArchWindow kAvx512Vnni{0, 0, false, kCpuAvx512Vnni | kCpuAvx2 | kCpuFma | kCpuF16c};
// kCpuAvxVnni: VEX-encoded vpdpbusd on ymm, offered only where this build
// has the AVX-VNNI kernels (features.cpp); they are the AVX2 ones built
// with it.
// kCpuAmxInt8: AMX tiles granted to this process (features.cpp); the AMX
// kernel adds each block in with AVX-512, hence its features too.
constexpr ArchWindow kAmx{0, 0, false, kCpuAmxInt8 | kCpuAvx512Vnni | kCpuAvx2 | kCpuFma | kCpuF16c};
constexpr ArchWindow kAvxVnni{0, 0, false, kCpuAvxVnni | kCpuAvx2 | kCpuFma | kCpuF16c};

// The panel kernels pay a rearrangement of each 16-row panel per call, which
// decode's few A rows cannot amortise: below MinN the tile kernel of the same
// ISA runs.
template <int64_t MinN>
bool q4_panel_can_run(const GemmArgs& g, std::string* why_not) {
  if (g.b.rows < MinN) {
    if (why_not) *why_not = "N=" + std::to_string(g.b.rows) + " is below its " + std::to_string(MinN);
    return false;
  }
  return true;
}

Registry make_registry() {
  Registry r;
  r.gemm = {
      {"cpu_amx", Format::q4_0, Format::q8_1, kAmx, kEpiFloatAll, q4_panel_can_run<kQ4AmxMinN>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_amx(a); }},
      {"cpu_avx512_vnni_panel", Format::q4_0, Format::q8_1, kAvx512Vnni, kEpiFloatAll,
       q4_panel_can_run<kQ4PanelMinN>, [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_avx512vnni_panel(a); }},
      {"cpu_avx512_vnni", Format::q4_0, Format::q8_1, kAvx512Vnni, kEpiFloatAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_avx512vnni(a); }},
      {"cpu_avx_vnni_panel", Format::q4_0, Format::q8_1, kAvxVnni, kEpiFloatAll,
       q4_panel_can_run<kQ4PanelAvx2MinN>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_avxvnni_panel(a); }},
      {"cpu_avx_vnni", Format::q4_0, Format::q8_1, kAvxVnni, kEpiFloatAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_avxvnni(a); }},
      {"cpu_avx2_panel", Format::q4_0, Format::q8_1, kAvx2, kEpiFloatAll, q4_panel_can_run<kQ4PanelAvx2MinN>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_avx2_panel(a); }},
      {"cpu_avx2", Format::q4_0, Format::q8_1, kAvx2, kEpiFloatAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_avx2(a); }},
      {"cpu_scalar", Format::q4_0, Format::q8_1, kAnyCpu, kEpiFloatAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_scalar(a); }},
      // q4_0x16 weights (qg.repack): the panel passes with no per-call
      // rearrangement, so from N = 1; AMX from where it beats them.
      {"cpu_q4_0x16_amx", Format::q4_0x16, Format::q8_1, kAmx, kEpiFloatAll, q4_panel_can_run<kQ4x16AmxMinN>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0x16_amx(a); }},
      {"cpu_q4_0x16_avx512_vnni", Format::q4_0x16, Format::q8_1, kAvx512Vnni, kEpiFloatAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0x16_avx512vnni(a); }},
      {"cpu_q4_0x16_avx_vnni", Format::q4_0x16, Format::q8_1, kAvxVnni, kEpiFloatAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0x16_avxvnni(a); }},
      {"cpu_q4_0x16_avx2", Format::q4_0x16, Format::q8_1, kAvx2, kEpiFloatAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0x16_avx2(a); }},
      {"cpu_q4_0x16_scalar", Format::q4_0x16, Format::q8_1, kAnyCpu, kEpiFloatAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0x16_scalar(a); }},
  };
  // The integer family: every pair of integer formats, and integer weights
  // with group scales times float activations (weight-only).
  r.gemm.push_back({"cpu_i8_amx", Format::i8, Format::i8, kAmx, kEpiAll, i8_amx_can_run,
                    [](const GemmArgs& a, Stream) { return gemm_i8_amx(a); }});
  r.gemm.push_back({"cpu_i8_avx512_vnni", Format::i8, Format::i8, kAvx512Vnni, kEpiAll, i8_avx512vnni_can_run,
                    [](const GemmArgs& a, Stream) { return gemm_i8_avx512vnni(a); }});
  r.gemm.push_back({"cpu_i8_avx2", Format::i8, Format::i8, kAvx2, kEpiAll, i8_avx2_can_run,
                    [](const GemmArgs& a, Stream) { return gemm_i8_avx2(a); }});
  r.gemm.push_back({"cpu_i8_repacked", Format::i8, Format::i8, kAvx2, kEpiAll, operand_strided_along_k,
                    [](const GemmArgs& a, Stream s) { return gemm_i8_repacked(a, s); }});
  for (Format fb : {Format::f16, Format::bf16, Format::f32})
    r.gemm.push_back({"cpu_wo_avx512_vnni", Format::i4, fb, kAvx512Vnni, kEpiFloatAll, wo_avx512_can_run,
                      [](const GemmArgs& a, Stream) { return gemm_wo_avx512vnni(a); }});
  // Half-precision activations: 14 bits keep an f16 x of at least 2^-3 of
  // its block's largest exact (bf16: 2^-6). fp32 activations, whose bits 14
  // would drop, take 20 (docs/numerics.md), as cpu_wo_avx512_vnni carries
  // every dtype; listed for the half types too, after the 14-bit kernel, so
  // that it can be named.
  for (Format fb : {Format::f16, Format::bf16})
    r.gemm.push_back({"cpu_wo_avx2_fixed", Format::i4, fb, kAvx2, kEpiFloatAll, wo_avx2_fixed_can_run,
                      [](const GemmArgs& a, Stream) { return gemm_wo_avx2_fixed(a); }});
  for (Format fb : {Format::f32, Format::f16, Format::bf16})
    r.gemm.push_back({"cpu_wo_avx2_fixed20", Format::i4, fb, kAvx2, kEpiFloatAll, wo_avx2_fixed_can_run,
                      [](const GemmArgs& a, Stream) { return gemm_wo_avx2_fixed20(a); }});
  for (Format fb : {Format::f16, Format::bf16, Format::f32})
    r.gemm.push_back({"cpu_wo_avx2", Format::i4, fb, kAvx2, kEpiFloatAll, wo_avx2_can_run,
                      [](const GemmArgs& a, Stream) { return gemm_wo_avx2(a); }});
  constexpr Format kInts[] = {Format::i8, Format::i4, Format::i4x8};
  for (Format fa : kInts)
    for (Format fb : kInts)
      r.gemm.push_back({"cpu_int_reference", fa, fb, kAnyCpu, kEpiAll, any_shape<GemmArgs>,
                        [](const GemmArgs& a, Stream) { return gemm_int_reference(a); }});
  for (Format fa : {Format::i8, Format::i4})
    for (Format fb : {Format::f16, Format::bf16, Format::f32})
      r.gemm.push_back({"cpu_wo_reference", fa, fb, kAnyCpu, kEpiFloatAll, any_shape<GemmArgs>,
                        [](const GemmArgs& a, Stream) { return gemm_weight_only_reference(a); }});
  r.quantize = {
      {"cpu_reference", kGgmlFormats, kAnyCpu, any_shape<QuantizeArgs>,
       [](const QuantizeArgs& a, Stream) { return quantize_rows(a); }},
      {"cpu_reference", kIntegerFormats, kAnyCpu, any_shape<QuantizeArgs>,
       [](const QuantizeArgs& a, Stream) { return quantize_tensor_rows(a); }},
  };
  r.dequantize = {
      {"cpu_reference", kGgmlFormats, kAnyCpu, any_shape<DequantizeArgs>,
       [](const DequantizeArgs& a, Stream) { return dequantize_rows(a); }},
      {"cpu_reference", kIntegerFormats, kAnyCpu, any_shape<DequantizeArgs>,
       [](const DequantizeArgs& a, Stream) { return dequantize_tensor_rows(a); }},
  };
  return r;
}

}  // namespace

const Registry& registry() {
  static const Registry r = make_registry();
  return r;
}

}  // namespace qg::detail::cpu
