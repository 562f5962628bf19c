#include "kernels/elementwise/gather_rows.h"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

constexpr int kThreads = 128;

// Copies one row in pieces of `Piece` (uint4 or uint32_t); a negative `from` writes zeros.
template <typename Piece>
__device__ void CopyRow(const GatherRowsParams& p, int32_t t, int32_t i, int32_t from) {
  const int32_t pieces = p.row_bytes[t] / static_cast<int32_t>(sizeof(Piece));
  Piece* dst = reinterpret_cast<Piece*>(static_cast<unsigned char*>(p.dst[t]) +
                                        static_cast<int64_t>(i) * p.row_bytes[t]);
  if (from < 0) {
    for (int32_t k = threadIdx.x; k < pieces; k += kThreads) dst[k] = Piece{};
    return;
  }
  const Piece* src = reinterpret_cast<const Piece*>(static_cast<const unsigned char*>(p.src[t]) +
                                                    static_cast<int64_t>(from) * p.row_bytes[t]);
  for (int32_t k = threadIdx.x; k < pieces; k += kThreads) dst[k] = src[k];
}

// Block (i, t): destination row i of table t, 16 bytes a thread at a time where the row size
// allows (the tables are 16-byte aligned, so then every row is), else 4.
__global__ void __launch_bounds__(kThreads) GatherRowsKernel(GatherRowsParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int32_t i = blockIdx.x, t = blockIdx.y;
  const int32_t from = p.rows[i];
  if (p.row_bytes[t] % 16 == 0) {
    CopyRow<uint4>(p, t, i, from);
  } else {
    CopyRow<uint32_t>(p, t, i, from);
  }
}

}  // namespace

cudaError_t LaunchGatherRows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.tables < 1 || p.tables > kGatherMaxTables) return cudaErrorInvalidValue;
  for (int t = 0; t < p.tables; ++t) {
    if (p.row_bytes[t] <= 0 || p.row_bytes[t] % 4 != 0) return cudaErrorInvalidValue;
  }
  if (p.n <= 0) return cudaSuccess;
  return Launch(GatherRowsKernel, dim3(p.n, p.tables), kThreads, 0, stream, p);
}

}  // namespace llm::kernels
