#include "kernels/common.cuh"
#include "kernels/elementwise/rope_kv.h"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

constexpr int kThreads = 128;
// 12 blocks a row for llama-3-8b: a few rows still spread over many multiprocessors.
constexpr int kVecThreads = 64;

// Grid (rows, blocks per row): the row's items strided over its blocks' threads.
__global__ void __launch_bounds__(kThreads) RopeKvKernel(RopeKvParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int32_t r = blockIdx.x;
  if (p.row_slot[r] < 0) return;
  const int32_t items = RopeKvItems(p);
  for (int32_t k = blockIdx.y * blockDim.x + threadIdx.x; k < items; k += gridDim.y * blockDim.x) {
    RopeKvItem(p, r, k);
  }
}

// RopeKvKernel over the vector items (RopeKvVectorsFit).
__global__ void __launch_bounds__(kVecThreads) RopeKvVecKernel(RopeKvParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int32_t r = blockIdx.x;
  if (p.row_slot[r] < 0) return;
  const int32_t items = RopeKvVectorItems(p);
  for (int32_t k = blockIdx.y * kVecThreads + threadIdx.x; k < items;
       k += gridDim.y * kVecThreads) {
    RopeKvVectorItem(p, r, k);
  }
}

}  // namespace

cudaError_t LaunchRopeKv(const RopeKvParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (RopeKvVectorsFit(p)) {
    const int32_t per_row = (RopeKvVectorItems(p) + kVecThreads - 1) / kVecThreads;
    return Launch(RopeKvVecKernel, dim3(p.rows, per_row), kVecThreads, 0, stream, p);
  }
  // One item per thread: 28 blocks per row for llama-3-8b, so batch 1 is not one block.
  const int32_t per_row = (RopeKvItems(p) + kThreads - 1) / kThreads;
  return Launch(RopeKvKernel, dim3(p.rows, per_row), kThreads, 0, stream, p);
}

}  // namespace llm::kernels
