// SPDX-License-Identifier: MIT
// backend.h: how the core sees a backend. Each backend keeps one registry:
// kernel tables for gemm, quantize and dequantize. A table entry says, as data,
// which formats it serves, which hardware it needs (its arch window) and which
// epilogue features it implements; its can_run judges only shape and
// alignment, and writes why it refuses only when why_not is not null (the
// dispatcher passes null on a call's path and asks again only to report).
// dispatch.h walks a table in order (most specialised first).
// Args reaching a kernel have passed validate.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qg/ops.h"
#include "qg/runtime.h"

namespace qg::detail {

// ISA extensions a CPU kernel needs (features.cpp detects them).
enum CpuFeature : uint32_t {
  kCpuAvx2 = 1u << 0,
  kCpuFma = 1u << 1,
  kCpuF16c = 1u << 2,
  kCpuAvx512Vnni = 1u << 3,
  kCpuAvxVnni = 1u << 4,
  kCpuAmxInt8 = 1u << 5,
};

// The hardware a kernel runs on. CUDA: compute capabilities min_cc..max_cc
// (90 = sm_90; max_cc 0 = no upper bound); arch_specific code (sm_90a: wgmma,
// setmaxnreg) runs on min_cc exactly. CPU: the ISA bits it needs.
struct ArchWindow {
  int min_cc = 0;
  int max_cc = 0;
  bool arch_specific = false;
  uint32_t cpu_features = 0;
};

// Epilogue features (ops.h's Epilogue and GemmArgs) a GEMM kernel implements.
enum EpilogueCap : uint32_t {
  kEpiAlpha = 1u << 0,     // alpha != 1
  kEpiScales = 1u << 1,    // row_scale / col_scale
  kEpiBeta = 1u << 2,      // beta != 0 (reads C)
  kEpiBias = 1u << 3,
  kEpiRelu = 1u << 4,
  kEpiOutF16 = 1u << 5,
  kEpiOutBf16 = 1u << 6,
  kEpiStridedC = 1u << 7,  // ldc_n != 1
  kEpiZeroPoints = 1u << 8,  // row / column zero points of integer operands
  kEpiOutI32 = 1u << 9,      // int32 output (the exact integer sum)
  kEpiAll = (1u << 10) - 1,
  kEpiFloatAll = kEpiAll & ~(kEpiZeroPoints | kEpiOutI32),  // everything a float-accumulating kernel can do
};
// Whether op's blocks along K are adjacent (block_stride 0 means so): what
// the fast integer kernels of both backends need of both operands (an int8
// operand strided along K is repacked first: cpu_i8_repacked, cuda_i8_repacked).
inline bool contiguous_along_k(const Operand& op) {
  return op.block_stride == 0 || op.block_stride == format_traits(op.format).bytes_per_block;
}
// The repacking entries' can_run: an operand to copy, else why not.
inline bool operand_strided_along_k(const GemmArgs& g, std::string* why_not) {
  if (contiguous_along_k(g.a) && contiguous_along_k(g.b)) {
    if (why_not) *why_not = "both operands are contiguous along K (the int8 kernels read them as they are)";
    return false;
  }
  return true;
}

// The features a call needs, and their names ("bias, relu") for messages.
uint32_t epilogue_needs(const GemmArgs& args);
std::string epilogue_cap_names(uint32_t caps);

struct GemmKernel {
  const char* name;
  Format a_format, b_format;
  ArchWindow arch;
  uint32_t epilogue_caps;
  bool (*can_run)(const GemmArgs& args, std::string* why_not);
  Status (*run)(const GemmArgs& args, Stream stream);
  // Optional: the GEMM of the same arguments with B computed inside from the
  // float activations that `quantize` describes (its y is args.b's data and
  // is not written), the same bytes as quantize then run. linear_q4_0 calls
  // it where the chosen kernel has it, and quantize + run otherwise.
  Status (*run_quantizing)(const GemmArgs& args, const QuantizeArgs& quantize, Stream stream) = nullptr;
};

// Quantize and dequantize kernels serve a set of formats (bit 1 << Format).
template <class Args>
struct ConvertKernel {
  const char* name;
  uint32_t formats;
  ArchWindow arch;
  bool (*can_run)(const Args& args, std::string* why_not);
  Status (*run)(const Args& args, Stream stream);
};

constexpr uint32_t format_bit(Format f) { return 1u << static_cast<int>(f); }
constexpr uint32_t kAllFormats = (1u << kFormatCount) - 1;
constexpr uint32_t kGgmlFormats = format_bit(Format::q4_0) | format_bit(Format::q8_0) | format_bit(Format::q8_1);
constexpr uint32_t kIntegerFormats = format_bit(Format::i8) | format_bit(Format::i4) | format_bit(Format::i4x8);

struct Registry {
  std::vector<GemmKernel> gemm;
  std::vector<ConvertKernel<QuantizeArgs>> quantize;
  std::vector<ConvertKernel<DequantizeArgs>> dequantize;
};

namespace cpu {
const Registry& registry();
uint32_t feature_bits();              // run-time detected (QG_CPU_ISA=scalar clears them)
std::vector<std::string> features();  // their names
}  // namespace cpu

// Implemented by cuda/ when the CUDA backend is built, by no_cuda.cpp otherwise.
namespace cuda {
bool built();
std::string runtime_version();
std::vector<std::string> compiled_archs();
std::vector<CudaDeviceInfo> devices(std::string* why);
const Registry& registry();
// The compute capability of `device` (cached), false with *why when the
// device cannot be used: no such device, or no code in this build for it.
bool usable_device(int device, int* cc, std::string* why);
// Makes `device` the calling thread's current GPU. *previous gets the one
// current before (-1 when it could not be read: then nothing is put back).
// False, with *why (CUDA's error) and no error left behind, on failure.
bool select_device(int device, int* previous, std::string* why);
// Makes `previous` current again where another device is now (-1: nothing).
void restore_device(int previous) noexcept;
Status device_alloc(int device, size_t bytes, void** ptr);
void device_free(int device, void* ptr) noexcept;
Status internal_stream(int device, Stream* stream);
Status stream_synchronize(int device, Stream stream);
}  // namespace cuda

}  // namespace qg::detail
