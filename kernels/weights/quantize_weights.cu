#include "common/fp8.h"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/weights/quantize_weights.h"

namespace llm::kernels {
namespace {

constexpr int kThreads = 256;

// One block per row: the row's amax, then every element divided by the row's scale and
// encoded (the host's encoder, not the hardware's: the same bits as model::QuantizeFp8).
__global__ void __launch_bounds__(kThreads) QuantizeWeightRowsKernel(QuantizeWeightRowsParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* row = p.w + r * p.in;
  float amax = 0.0f;
  for (int32_t i = threadIdx.x; i < p.in; i += kThreads) amax = fmaxf(amax, fabsf(ToFloat(row[i])));
  const float scale = Fp8ScaleForAmax(BlockMax(amax, scratch));
  if (threadIdx.x == 0) p.scale[r] = scale;
  uint8_t* out = p.e4m3 + r * p.in;
  for (int32_t i = threadIdx.x; i < p.in; i += kThreads) {
    out[i] = Fp8E4M3FromFloat(ToFloat(row[i]) / scale);
  }
}

}  // namespace

cudaError_t LaunchQuantizeWeightRows(const QuantizeWeightRowsParams& p, cudaStream_t stream) {
  if (p.out <= 0) return cudaSuccess;
  if (p.out > 0x7FFFFFFF || p.in <= 0) return cudaErrorInvalidValue;
  return Launch(QuantizeWeightRowsKernel, static_cast<unsigned>(p.out), kThreads, 0, stream, p);
}

}  // namespace llm::kernels
