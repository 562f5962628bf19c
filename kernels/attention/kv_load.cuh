// Loads of eight consecutive elements of the paged KV cache (kernels/paged_cache.h), for the
// attention kernels, in the two forms they take: floats, and bf16 pairs for the tensor cores.
// FP8 = false: 16 bytes of bf16 (16-byte aligned); FP8 = true: 8 bytes of E4M3 (8-byte
// aligned), each decoded exactly (the hardware's pair conversion to half, then to float).
// Internal to kernels/attention.
#ifndef LLM_KERNELS_ATTENTION_KV_LOAD_CUH_
#define LLM_KERNELS_ATTENTION_KV_LOAD_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common.cuh"

namespace llm::kernels {

// Elements [at, at + 8) of `cache` as floats; E4M3 ones times `scale` (the CPU reference's
// values, one rounding: common/fp8.h's Fp8RoundTrip).
template <bool FP8>
__device__ __forceinline__ void LoadKvFloats8(const void* cache, int64_t at, float scale,
                                              float* dst) {
  if constexpr (FP8) {
    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(cache) + at);
    E4M3x4ToFloats(raw.x, dst);
    E4M3x4ToFloats(raw.y, dst + 4);
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] *= scale;
  } else {
    const uint4 raw =
        *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(cache) + at);
    const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] = ToFloat(h[i]);
  }
}

// Elements [at, at + 8) of `cache` as four words of bf16 pairs (element 2i in the low half of
// word i), or zeros where !keep; E4M3 ones unscaled (exact in bf16: the caller applies the
// scale to what the product makes). The load is issued either way (callers point a dropped one
// at memory that exists), so no lane branches around it.
template <bool FP8>
__device__ __forceinline__ void LoadKvWords8(const void* cache, int64_t at, bool keep,
                                             uint32_t* w) {
  if constexpr (FP8) {
    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(cache) + at);
    float f[8];
    E4M3x4ToFloats(raw.x, f);
    E4M3x4ToFloats(raw.y, f + 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      w[i] = keep ? *reinterpret_cast<const uint32_t*>(&pair) : 0u;
    }
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(cache) + at);
    w[0] = keep ? v.x : 0u;
    w[1] = keep ? v.y : 0u;
    w[2] = keep ? v.z : 0u;
    w[3] = keep ? v.w : 0u;
  }
}

// Eight E4M3 elements (`raw`, element 0 in the low byte of x) as four words of half pairs
// (element 2i in the low half of word i), or zeros where !keep, unscaled: exact (E4M3 is a subset
// of half), and one conversion per pair on sm_89 and newer, against three more per pair to reach
// bf16 through floats (LoadKvWords8<true>). For the fp16 products of the FP8 decode kernel,
// whose conversions bound it otherwise.
__device__ __forceinline__ void E4M3x8ToHalfWords(uint2 raw, bool keep, uint32_t* w) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? raw.x : raw.y;
    const auto pair = static_cast<__nv_fp8x2_storage_t>((word >> (16 * (i % 2))) & 0xFFFFu);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    w[i] = keep ? (static_cast<uint32_t>(h.y) << 16) | h.x : 0u;
  }
}

// The 8 bytes of E4M3 elements [at, at + 8) of `cache` (8-byte aligned), as they are.
__device__ __forceinline__ uint2 LoadKvRaw8(const void* cache, int64_t at) {
  return *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(cache) + at);
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_KV_LOAD_CUH_
