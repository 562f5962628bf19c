#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/elementwise/fp8_rows.cuh"
#include "kernels/elementwise/rmsnorm.cuh"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

// One block per output row, the row held in registers: each thread loads VEC float4 of x (and
// delta) at once, so a small batch's norm costs one round of loads, one block reduction and
// one round of stores. dim % 4 == 0 and dim <= 4 * VEC * kRmsNormThreads.
// FP8: the normed fp32 values are quantised (fp8_out.h) instead of rounded to bf16: the row's
// amax over the block (kRow), or each 128 inputs' over the warp that holds them (kGroup: the
// float4s of one round of one warp are 128 consecutive inputs).
template <int VEC>
__device__ __forceinline__ void WriteFp8Row(const RmsNormParams& p, int32_t r,
                                            const float4 (&v)[VEC], const uint2* w, float inv,
                                            float* scratch) {
  const int32_t n4 = p.dim / 4;
  float4 y[VEC];
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const int32_t i = RmsNormVector(threadIdx.x, k);
    y[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < n4) {
      const uint2 wr = w[i];
      const __nv_bfloat16* wh = reinterpret_cast<const __nv_bfloat16*>(&wr);
      y[k] = make_float4(ToFloat(wh[0]) * (v[k].x * inv), ToFloat(wh[1]) * (v[k].y * inv),
                         ToFloat(wh[2]) * (v[k].z * inv), ToFloat(wh[3]) * (v[k].w * inv));
    }
    amax = fmaxf(amax, Max4Abs(y[k].x, y[k].y, y[k].z, y[k].w));
  }
  const Fp8Out& q = p.fp8;
  float row_scale = 0.0f;
  if (q.static_scale != nullptr) {
    row_scale = *q.static_scale;
  } else if (q.scales == ActivationScales::kRow) {
    row_scale = Fp8ScaleForAmax(BlockMax(amax, scratch));
  }
  if (threadIdx.x == 0 && q.scales == ActivationScales::kRow)
    *Fp8ScaleSlot(q, p.rows, r, 0) = row_scale;
  uint32_t* out = reinterpret_cast<uint32_t*>(q.x + static_cast<int64_t>(r) * p.dim);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const int32_t i = RmsNormVector(threadIdx.x, k);
    float scale = row_scale;
    if (q.scales == ActivationScales::kGroup) {
      // Each lane's group max of round k (a warp-wide shuffle: every lane takes part).
      scale = Fp8ScaleForAmax(WarpMax(Max4Abs(y[k].x, y[k].y, y[k].z, y[k].w)));
      const int32_t first = RmsNormVector(threadIdx.x - threadIdx.x % 32, k);
      if (threadIdx.x % 32 == 0 && first < n4) {
        *Fp8ScaleSlot(q, p.rows, r, first * 4 / kFp8BlockSize) = scale;
      }
    }
    if (i < n4) out[i] = PackE4M3(y[k].x, y[k].y, y[k].z, y[k].w, scale);
  }
}

template <int VEC, bool FP8>
__global__ void __launch_bounds__(kRmsNormThreads) RmsNormVecKernel(RmsNormParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ float scratch[32];
  const int32_t r = blockIdx.x;
  const int32_t src = p.rows_index != nullptr ? p.rows_index[r] : r;
  if (src < 0) return;
  const int32_t n4 = p.dim / 4;
  float4* x = reinterpret_cast<float4*>(p.x + static_cast<int64_t>(src) * p.dim);
  const float4* d =
      p.delta != nullptr
          ? reinterpret_cast<const float4*>(p.delta + static_cast<int64_t>(src) * p.dim)
          : nullptr;
  float4 v[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const int32_t i = RmsNormVector(threadIdx.x, k);  // rmsnorm_order.h
    v[k] = i < n4 ? x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (d != nullptr) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const int32_t i = RmsNormVector(threadIdx.x, k);
      if (i < n4) {
        const float4 e = d[i];
        v[k] = make_float4(v[k].x + e.x, v[k].y + e.y, v[k].z + e.z, v[k].w + e.w);
        x[i] = v[k];
      }
    }
  }
  // rmsnorm.cuh's order (the GEMV's norm prologue sums the same way); the zeros past the row
  // add nothing.
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) sum_sq = AddSquares(v[k], sum_sq);
  const float inv = RmsInverse(BlockSum(sum_sq, scratch), p.dim, p.eps);
  const uint2* w = reinterpret_cast<const uint2*>(p.weight);
  if constexpr (FP8) {
    WriteFp8Row<VEC>(p, r, v, w, inv, scratch);
    return;
  }
  uint2* out = reinterpret_cast<uint2*>(p.out + static_cast<int64_t>(r) * p.dim);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const int32_t i = RmsNormVector(threadIdx.x, k);
    if (i >= n4) continue;
    const uint2 wr = w[i];
    const __nv_bfloat16* wh = reinterpret_cast<const __nv_bfloat16*>(&wr);
    uint2 o;
    __nv_bfloat16* oh = reinterpret_cast<__nv_bfloat16*>(&o);
    oh[0] = ToBf16(ToFloat(wh[0]) * (v[k].x * inv));
    oh[1] = ToBf16(ToFloat(wh[1]) * (v[k].y * inv));
    oh[2] = ToBf16(ToFloat(wh[2]) * (v[k].z * inv));
    oh[3] = ToBf16(ToFloat(wh[3]) * (v[k].w * inv));
    out[i] = o;
  }
}

// Any dim: one block per output row, two strided passes.
__global__ void RmsNormKernel(RmsNormParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ float scratch[32];
  const int32_t r = blockIdx.x;
  const int32_t src = p.rows_index != nullptr ? p.rows_index[r] : r;
  if (src < 0) return;
  float* x = p.x + static_cast<int64_t>(src) * p.dim;
  const float* d = p.delta != nullptr ? p.delta + static_cast<int64_t>(src) * p.dim : nullptr;
  float sum_sq = 0.0f;
  for (int32_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    float v = x[i];
    if (d != nullptr) {
      v += d[i];
      x[i] = v;
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  const float total = BlockSum(sum_sq, scratch);
  const float inv = rsqrtf(total / p.dim + p.eps);
  __nv_bfloat16* out = p.out + static_cast<int64_t>(r) * p.dim;
  for (int32_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    out[i] = ToBf16(ToFloat(p.weight[i]) * (x[i] * inv));
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  // 16-byte rows (and 8-byte weight and output rows) need dim % 4 == 0 and aligned bases.
  const bool fp8 = p.fp8.on();
  const bool aligned =
      p.dim % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
      (p.delta == nullptr || reinterpret_cast<uintptr_t>(p.delta) % 16 == 0) &&
      reinterpret_cast<uintptr_t>(p.weight) % 8 == 0 &&
      (fp8 ? reinterpret_cast<uintptr_t>(p.fp8.x) % 16 == 0 && p.fp8.scale != nullptr &&
                 (p.fp8.static_scale == nullptr || p.fp8.scales == ActivationScales::kRow)
           : reinterpret_cast<uintptr_t>(p.out) % 8 == 0);
  const int vec = aligned ? RmsNormVecFloat4s(p.dim / 4) : 0;
  if (fp8) {
    switch (vec) {
      case 1:
        return Launch(RmsNormVecKernel<1, true>, p.rows, kRmsNormThreads, 0, stream, p);
      case 2:
        return Launch(RmsNormVecKernel<2, true>, p.rows, kRmsNormThreads, 0, stream, p);
      case 4:
        return Launch(RmsNormVecKernel<4, true>, p.rows, kRmsNormThreads, 0, stream, p);
      case 8:
        return Launch(RmsNormVecKernel<8, true>, p.rows, kRmsNormThreads, 0, stream, p);
      default:
        return cudaErrorInvalidValue;  // FP8 rows need the one-block-per-row kernel
    }
  }
  switch (vec) {
    case 1:
      return Launch(RmsNormVecKernel<1, false>, p.rows, kRmsNormThreads, 0, stream, p);
    case 2:
      return Launch(RmsNormVecKernel<2, false>, p.rows, kRmsNormThreads, 0, stream, p);
    case 4:
      return Launch(RmsNormVecKernel<4, false>, p.rows, kRmsNormThreads, 0, stream, p);
    case 8:
      return Launch(RmsNormVecKernel<8, false>, p.rows, kRmsNormThreads, 0, stream, p);
    default:
      break;
  }
  const int threads = p.dim >= 1024 ? 1024 : (p.dim >= 256 ? 256 : 128);
  return Launch(RmsNormKernel, p.rows, threads, 0, stream, p);
}

}  // namespace llm::kernels
