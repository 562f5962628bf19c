// Device helpers shared by the kernels (internal to kernels/).
#ifndef LLM_KERNELS_COMMON_CUH_
#define LLM_KERNELS_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ __nv_bfloat16 ToBf16(float v) { return __float2bfloat16_rn(v); }

// The four E4M3 values of `word` (byte j the j-th) as floats, exactly: the hardware's pair
// conversion to half on sm_89 and newer (emulated before), then half to float.
__device__ __forceinline__ void E4M3x4ToFloats(uint32_t word, float* f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const auto pair = static_cast<__nv_fp8x2_storage_t>((word >> (16 * h)) & 0xFFFFu);
    const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    const float2 two = __half22float2(*reinterpret_cast<const __half2*>(&raw));
    f[2 * h] = two.x;
    f[2 * h + 1] = two.y;
  }
}

// Sum over the `width` lanes of each group of a warp (width a power of two <= 32).
__device__ __forceinline__ float GroupSum(float v, int width) {
  for (int offset = width / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset, width);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Block-wide sum of one float per thread; every thread gets the result. `scratch` holds at
// least 32 floats; blockDim.x is a multiple of 32.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = GroupSum(v, 32);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : 0.0f;
  total = GroupSum(total, 32);
  return total;
}

__device__ __forceinline__ double BlockSumDouble(double v, double* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double total = lane < warps ? scratch[lane] : 0.0;
  for (int offset = 16; offset > 0; offset /= 2)
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  return total;
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = lane < warps ? scratch[lane] : -__builtin_huge_valf();
  return WarpMax(m);
}

// silu(g) * u, the one formula of SiluMulKernel and the fused gate/up GEMV (same bits).
__device__ __forceinline__ float SiluTimes(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

inline int CeilDiv(int a, int b) { return (a + b - 1) / b; }

}  // namespace llm::kernels

#endif  // LLM_KERNELS_COMMON_CUH_
