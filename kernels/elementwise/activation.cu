#include "kernels/common.cuh"
#include "kernels/elementwise/activation.h"
#include "kernels/elementwise/fp8_row_kernel.cuh"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

// Fp8RowKernel's source: silu(gate) * up of a gate/up row, four of each from one 8-byte load
// (inter % 4 == 0, i % 4 == 0 and an 8-byte aligned base: LaunchSiluMul checks).
struct SiluMulRows {
  const __nv_bfloat16* gate_up;
  int32_t inter;
  __device__ float4 Values(int32_t r, int32_t i) const {
    const __nv_bfloat16* row = gate_up + static_cast<int64_t>(r) * 2 * inter + i;
    const uint2 gate = *reinterpret_cast<const uint2*>(row);
    const uint2 up = *reinterpret_cast<const uint2*>(row + inter);
    const __nv_bfloat16* g = reinterpret_cast<const __nv_bfloat16*>(&gate);
    const __nv_bfloat16* u = reinterpret_cast<const __nv_bfloat16*>(&up);
    return make_float4(
        SiluTimes(ToFloat(g[0]), ToFloat(u[0])), SiluTimes(ToFloat(g[1]), ToFloat(u[1])),
        SiluTimes(ToFloat(g[2]), ToFloat(u[2])), SiluTimes(ToFloat(g[3]), ToFloat(u[3])));
  }
};

// Any inter: one output a thread, grid-strided.
__global__ void SiluMulKernel(SiluMulParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int64_t n = static_cast<int64_t>(p.rows) * p.inter;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = k / p.inter, i = k % p.inter;
    const __nv_bfloat16* row = p.gate_up + r * 2 * p.inter;
    const float g = ToFloat(row[i]);
    const float u = ToFloat(row[p.inter + i]);
    p.out[k] = ToBf16(SiluTimes(g, u));
  }
}

constexpr int kVecThreads = 256;
constexpr int32_t kMaxGridY = 65535;

// inter % 8 == 0 and 16-byte aligned rows: eight outputs a thread from one 16-byte load of the
// gate and one of the up, one 16-byte store; grid (vectors of a row / threads, rows), rows
// past gridDim.y strided. No 64-bit division: the prompt step's rows * inter is tens of millions
// of outputs. Each output is SiluMulKernel's (the same bits).
__global__ void __launch_bounds__(kVecThreads) SiluMulVecKernel(SiluMulParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int32_t vectors = p.inter / 8;
  const int32_t v = blockIdx.x * kVecThreads + threadIdx.x;
  if (v >= vectors) return;
  for (int32_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const uint4* row =
        reinterpret_cast<const uint4*>(p.gate_up + static_cast<int64_t>(r) * 2 * p.inter);
    const uint4 gate = row[v], up = row[vectors + v];
    const __nv_bfloat16* g = reinterpret_cast<const __nv_bfloat16*>(&gate);
    const __nv_bfloat16* u = reinterpret_cast<const __nv_bfloat16*>(&up);
    uint4 out;
    __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = ToBf16(SiluTimes(ToFloat(g[k]), ToFloat(u[k])));
    reinterpret_cast<uint4*>(p.out + static_cast<int64_t>(r) * p.inter)[v] = out;
  }
}

}  // namespace

cudaError_t LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.fp8.on()) {
    if (reinterpret_cast<uintptr_t>(p.gate_up) % 8 != 0) return cudaErrorInvalidValue;
    return LaunchFp8Rows(SiluMulRows{p.gate_up, p.inter}, p.rows, p.inter, p.fp8, stream);
  }
  const int64_t n = static_cast<int64_t>(p.rows) * p.inter;
  if (n <= 0) return cudaSuccess;
  if (p.inter % 8 == 0 && reinterpret_cast<uintptr_t>(p.gate_up) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(p.out) % 16 == 0) {
    const dim3 grid((p.inter / 8 + kVecThreads - 1) / kVecThreads,
                    p.rows < kMaxGridY ? p.rows : kMaxGridY);
    return Launch(SiluMulVecKernel, grid, kVecThreads, 0, stream, p);
  }
  const int blocks = static_cast<int>(n / 256 + 1 < 65535 ? n / 256 + 1 : 65535);
  return Launch(SiluMulKernel, blocks, 256, 0, stream, p);
}

}  // namespace llm::kernels
