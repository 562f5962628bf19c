#include "common/random_weights.h"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/weights/random_init.h"

namespace llm::kernels {
namespace {

__global__ void RandomInitKernel(RandomInitParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = model::SyntheticValue(p.stream, static_cast<uint64_t>(i), p.bound, p.constant);
    if (p.out != nullptr) {
      p.out[i] = ToBf16(v);
    } else {
      p.out_f32[i] = ToFloat(ToBf16(v));  // what a bf16 checkpoint holds
    }
  }
}

}  // namespace

cudaError_t LaunchRandomInit(const RandomInitParams& p, cudaStream_t stream) {
  if (p.count <= 0) return cudaSuccess;
  const int64_t blocks = p.count / 256 + 1;
  return Launch(RandomInitKernel, static_cast<int>(blocks < 65535 ? blocks : 65535), 256, 0, stream,
                p);
}

}  // namespace llm::kernels
