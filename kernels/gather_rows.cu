#include "kernels/gather_rows.h"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

constexpr int kThreads = 128;

// Block (i, t): destination row i of table t, 16 bytes a thread at a time.
__global__ void __launch_bounds__(kThreads) GatherRowsKernel(GatherRowsParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int32_t i = blockIdx.x, t = blockIdx.y;
  const int32_t pieces = p.row_bytes[t] / 16;
  const int32_t from = p.rows[i];
  uint4* dst = reinterpret_cast<uint4*>(static_cast<unsigned char*>(p.dst[t]) +
                                        static_cast<int64_t>(i) * p.row_bytes[t]);
  if (from < 0) {
    for (int32_t k = threadIdx.x; k < pieces; k += kThreads) dst[k] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(p.src[t]) +
                                                    static_cast<int64_t>(from) * p.row_bytes[t]);
  for (int32_t k = threadIdx.x; k < pieces; k += kThreads) dst[k] = src[k];
}

}  // namespace

cudaError_t LaunchGatherRows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.tables < 1 || p.tables > kGatherMaxTables) return cudaErrorInvalidValue;
  for (int t = 0; t < p.tables; ++t) {
    if (p.row_bytes[t] <= 0 || p.row_bytes[t] % 16 != 0) return cudaErrorInvalidValue;
  }
  if (p.n <= 0) return cudaSuccess;
  return Launch(GatherRowsKernel, dim3(p.n, p.tables), kThreads, 0, stream, p);
}

}  // namespace llm::kernels
