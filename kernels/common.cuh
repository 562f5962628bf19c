// Device helpers shared by the kernels (internal to kernels/).
#ifndef LLM_KERNELS_COMMON_CUH_
#define LLM_KERNELS_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ __nv_bfloat16 ToBf16(float v) { return __float2bfloat16_rn(v); }

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
