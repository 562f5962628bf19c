// Where a kernel that makes an FP8 product's input (RMSNorm, SiLU-and-multiply, the quantise
// pass over bf16 rows) writes it: E4M3 rows and their scales in the layout Gemm reads
// (kernels/gemm/weight.h), instead of bf16. Each row (kRow) or each 128 inputs of a row (kGroup)
// is divided by its scale, amax / 448 (at least 1 / (448 * 512); common/fp8.h), and rounded to
// nearest even, saturating; with a static scale (a checkpoint's input_scale, one device float)
// every row is divided by it and its scale entries say so. The values quantised are the
// kernel's fp32 results, not their bf16 rounding, as the CPU reference rounds its fp32 rows
// (model::Fp8RoundTripActivations).
#ifndef LLM_KERNELS_ELEMENTWISE_FP8_OUT_H_
#define LLM_KERNELS_ELEMENTWISE_FP8_OUT_H_

#include <cstdint>

#include "kernels/gemm/weight.h"

namespace llm::kernels {

struct Fp8Out {
  uint8_t* x = nullptr;  // [rows, dim] e4m3; null: the kernel writes bf16 as before
  float* scale = nullptr;
  ActivationScales scales = ActivationScales::kRow;
  const float* static_scale = nullptr;  // kRow only: quantise with this instead of the row's

  bool on() const { return x != nullptr; }
  // The input of the product these rows feed.
  Fp8Input Input() const { return {x, scale, scales}; }
};

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_FP8_OUT_H_
