// Device helpers of the tensor-core kernels (prefill_attention.cu, attention_mma.cu): one
// mma.sync.m16n8k16 (bf16 or half in, fp32 accumulate; fragment layouts in mma_fragment.h),
// bf16 and half packing, and the reductions over the 4 lanes that share a fragment row.
#ifndef LLM_KERNELS_ATTENTION_MMA_CUH_
#define LLM_KERNELS_ATTENTION_MMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

// D += A B for one m16n8k16 tile.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A B for an A whose rows 8-15 are zero (registers 1 and 3): only C's rows 0-7 are carried
// (elements 0 and 1, d0 and d1); rows 8-15 start from zero and go to dead outputs, so they hold
// no registers across calls. A and B are bf16 pairs, or half pairs where F16.
template <bool F16 = false>
__device__ __forceinline__ void MmaRows0To7(float& d0, float& d1, uint32_t a0, uint32_t a2,
                                            uint32_t b0, uint32_t b1) {
#define LLM_MMA_ROWS_0_TO_7(TYPE)                                   \
  asm volatile(                                                     \
      "{\n"                                                         \
      ".reg .f32 zero, dead0, dead1;\n"                             \
      ".reg .b32 zero_a;\n"                                         \
      "mov.f32 zero, 0f00000000;\n"                                 \
      "mov.b32 zero_a, 0;\n"                                        \
      "mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE        \
      ".f32 {%0, %1, dead0, dead1}, "                               \
      "{%2, zero_a, %3, zero_a}, {%4, %5}, {%0, %1, zero, zero};\n" \
      "}\n"                                                         \
      : "+f"(d0), "+f"(d1)                                          \
      : "r"(a0), "r"(a2), "r"(b0), "r"(b1))
  if constexpr (F16) {
    LLM_MMA_ROWS_0_TO_7("f16");
  } else {
    LLM_MMA_ROWS_0_TO_7("bf16");
  }
#undef LLM_MMA_ROWS_0_TO_7
}

// Two floats rounded to bf16, `lo` in the low 16 bits.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two floats rounded to half, `lo` in the low 16 bits.
__device__ __forceinline__ uint32_t PackHalf(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// A word of two bf16 as two halves, clamped to half's finite range (exact within it, down to
// half's subnormals).
__device__ __forceinline__ uint32_t Bf16PairToHalfPair(uint32_t w) {
  constexpr float kHalfMax = 65504.0f;
  const float lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xFFFF0000u);
  return PackHalf(fminf(fmaxf(lo, -kHalfMax), kHalfMax), fminf(fmaxf(hi, -kHalfMax), kHalfMax));
}

// The max and sum of a row, spread over the 4 lanes of a quad.
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_MMA_CUH_
