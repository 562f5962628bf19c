// The kernel that writes FP8 rows from values computed element by element (bf16 rows as they
// are, or SiLU-and-multiply of a gate/up row): one block of 8 warps per row; a group of 128
// inputs is one warp's (a lane's 4 consecutive inputs), group g in warp g % 8 of round g / 8.
// kGroup: each group's amax is the warp's, and the group is written at once. kRow: a first pass
// finds the row's amax (the block's), a second recomputes and writes (the values are cheap
// beside a pass over memory that is still in L1/L2). Static: one pass with the given scale.
#ifndef LLM_KERNELS_ELEMENTWISE_FP8_ROW_KERNEL_CUH_
#define LLM_KERNELS_ELEMENTWISE_FP8_ROW_KERNEL_CUH_

#include <cstdint>

#include "kernels/elementwise/fp8_rows.cuh"
#include "kernels/launch.cuh"

namespace llm::kernels {

inline constexpr int kFp8RowThreads = 256;

// SOURCE: a struct with `__device__ float4 Values(int32_t row, int32_t i) const` returning
// inputs i..i+3 of a row (i a multiple of 4 below dim).
template <typename SOURCE>
__global__ void __launch_bounds__(kFp8RowThreads)
    Fp8RowKernel(SOURCE src, int32_t rows, int32_t dim, Fp8Out q) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ float scratch[32];
  const int32_t r = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t groups = Fp8Blocks(dim), warps = kFp8RowThreads / 32;
  const auto value_at = [&](int32_t g, float4* v) {
    const int32_t i = g * kFp8BlockSize + 4 * lane;
    *v = i < dim ? src.Values(r, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return i;
  };
  uint32_t* out = reinterpret_cast<uint32_t*>(q.x + static_cast<int64_t>(r) * dim);
  float row_scale = 0.0f;
  if (q.scales == ActivationScales::kRow) {
    if (q.static_scale != nullptr) {
      row_scale = *q.static_scale;
    } else {
      float amax = 0.0f;
      for (int32_t g = warp; g < groups; g += warps) {
        float4 v;
        value_at(g, &v);
        amax = fmaxf(amax, Max4Abs(v.x, v.y, v.z, v.w));
      }
      row_scale = Fp8ScaleForAmax(BlockMax(amax, scratch));
    }
    if (threadIdx.x == 0) *Fp8ScaleSlot(q, rows, r, 0) = row_scale;
  }
  // Every warp runs the same number of rounds, so the group shuffles see all 32 lanes.
  const int32_t rounds = (groups + warps - 1) / warps;
  for (int32_t round = 0; round < rounds; ++round) {
    const int32_t g = round * warps + warp;
    float4 v;
    const int32_t i = value_at(g < groups ? g : 0, &v);
    float scale = row_scale;
    if (q.scales == ActivationScales::kGroup) {
      scale = Fp8ScaleForAmax(WarpMax(Max4Abs(v.x, v.y, v.z, v.w)));
      if (lane == 0 && g < groups) *Fp8ScaleSlot(q, rows, r, g) = scale;
    }
    if (g < groups && i < dim) out[i / 4] = PackE4M3(v.x, v.y, v.z, v.w, scale);
  }
}

template <typename SOURCE>
cudaError_t LaunchFp8Rows(const SOURCE& src, int32_t rows, int32_t dim, const Fp8Out& q,
                          cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (dim % 4 != 0 || !q.on() || q.scale == nullptr || reinterpret_cast<uintptr_t>(q.x) % 4 != 0 ||
      (q.static_scale != nullptr && q.scales != ActivationScales::kRow)) {
    return cudaErrorInvalidValue;
  }
  return Launch(Fp8RowKernel<SOURCE>, rows, kFp8RowThreads, 0, stream, src, rows, dim, q);
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_FP8_ROW_KERNEL_CUH_
