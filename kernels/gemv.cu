#include "kernels/common.cuh"
#include "kernels/gemv.h"

namespace llm::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;

// Eight bf16 (one 16-byte vector) as floats.
__device__ __forceinline__ void Unpack8(const uint4& v, float* f) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 pair = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[k]));
    f[2 * k] = pair.x;
    f[2 * k + 1] = pair.y;
  }
}

// One warp per output o: lane l takes the 16-byte vectors l, l + 32, ... of w's row o (read
// once, not kept in L1: each weight is used by this warp only) and the same vectors of every
// row of x (read by all warps, so cached), then the warp sums its lanes. GATED: the warp also
// streams row out + o (the up projection) and writes silu(gate) * up.
template <int ROWS, bool F32, bool GATED>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) GemvKernel(GemvParams p) {
  const int32_t o = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (o >= p.out) return;  // the whole warp leaves together
  const int32_t vecs = p.in / 8;
  const uint4* w = reinterpret_cast<const uint4*>(p.w + static_cast<int64_t>(o) * p.in);
  const uint4* w_up =
      reinterpret_cast<const uint4*>(p.w + (static_cast<int64_t>(o) + p.out) * p.in);
  const uint4* x = reinterpret_cast<const uint4*>(p.x);
  constexpr int kUpRows = GATED ? ROWS : 1;
  float acc[ROWS], acc_up[kUpRows];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
#pragma unroll
  for (int r = 0; r < kUpRows; ++r) acc_up[r] = 0.0f;
#pragma unroll 4
  for (int32_t v = lane; v < vecs; v += 32) {
    float wf[8], uf[8];
    Unpack8(__ldcs(w + v), wf);
    if constexpr (GATED) Unpack8(__ldcs(w_up + v), uf);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float xf[8];
      Unpack8(__ldg(x + static_cast<int64_t>(r) * vecs + v), xf);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[r] = fmaf(xf[k], wf[k], acc[r]);
      if constexpr (GATED) {
#pragma unroll
        for (int k = 0; k < 8; ++k) acc_up[r] = fmaf(xf[k], uf[k], acc_up[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = GroupSum(acc[r], 32);
  if constexpr (GATED) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc_up[r] = GroupSum(acc_up[r], 32);
  }
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int64_t at = static_cast<int64_t>(r) * p.out + o;
    if constexpr (GATED) {
      const auto* bias = static_cast<const __nv_bfloat16*>(p.bias);
      const float bg = bias != nullptr ? ToFloat(bias[o]) : 0.0f;
      const float bu = bias != nullptr ? ToFloat(bias[p.out + o]) : 0.0f;
      // Rounded to bf16 first, as the product's output that SiluMulKernel would read.
      const float g = ToFloat(ToBf16(acc[r] + bg));
      const float u = ToFloat(ToBf16(acc_up[r] + bu));
      static_cast<__nv_bfloat16*>(p.y)[at] = ToBf16(SiluTimes(g, u));
    } else if constexpr (F32) {
      const float b = p.bias != nullptr ? static_cast<const float*>(p.bias)[o] : 0.0f;
      static_cast<float*>(p.y)[at] = acc[r] + b;
    } else {
      const float b =
          p.bias != nullptr ? ToFloat(static_cast<const __nv_bfloat16*>(p.bias)[o]) : 0.0f;
      static_cast<__nv_bfloat16*>(p.y)[at] = ToBf16(acc[r] + b);
    }
  }
}

template <int ROWS>
cudaError_t Launch(const GemvParams& p, cudaStream_t stream) {
  const dim3 grid((p.out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const dim3 block(kWarpsPerBlock * 32);
  if (p.gated) {
    GemvKernel<ROWS, false, true><<<grid, block, 0, stream>>>(p);
  } else if (p.out_f32) {
    GemvKernel<ROWS, true, false><<<grid, block, 0, stream>>>(p);
  } else {
    GemvKernel<ROWS, false, false><<<grid, block, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace

bool GemvSupports(const GemvParams& p) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return p.rows >= 1 && p.rows <= kGemvMaxRows && p.in > 0 && p.in % 8 == 0 && p.out > 0 &&
         aligned(p.x) && aligned(p.w) && !(p.gated && p.out_f32);
}

cudaError_t LaunchGemv(const GemvParams& p, cudaStream_t stream) {
  if (!GemvSupports(p)) return cudaErrorInvalidValue;
  switch (p.rows) {
    case 1:
      return Launch<1>(p, stream);
    case 2:
      return Launch<2>(p, stream);
    case 3:
      return Launch<3>(p, stream);
    case 4:
      return Launch<4>(p, stream);
    case 5:
      return Launch<5>(p, stream);
    case 6:
      return Launch<6>(p, stream);
    case 7:
      return Launch<7>(p, stream);
    default:
      return Launch<8>(p, stream);
  }
}

}  // namespace llm::kernels
