// Gathers whole rows of up to two tables in one launch: row i of dst[t] becomes row rows[i] of
// src[t], or zeros where rows[i] < 0 (a padding row). The last layer of a step with prompt rows
// uses it to move the rows that are sampled (and their attention output) to the front, so the
// layer's o and MLP products and the final norm run on those rows alone
// (runner::cuda::CudaModel::Forward). Sources and destinations must not overlap.
#ifndef LLM_KERNELS_ELEMENTWISE_GATHER_ROWS_H_
#define LLM_KERNELS_ELEMENTWISE_GATHER_ROWS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace llm::kernels {

inline constexpr int kGatherMaxTables = 2;

struct GatherRowsParams {
  const int32_t* rows;  // [n] source row of each destination row; < 0: a zero row
  int32_t n;
  int32_t tables;  // 1 .. kGatherMaxTables
  const void* src[kGatherMaxTables];
  void* dst[kGatherMaxTables];
  // Multiples of 4 (fp32 rows of any width); copied 16 bytes at a time where a multiple of 16.
  // Tables 16-byte aligned.
  int32_t row_bytes[kGatherMaxTables];
};

// cudaErrorInvalidValue for a table count outside [1, kGatherMaxTables] or a row size that is
// not a positive multiple of 4 bytes.
cudaError_t LaunchGatherRows(const GatherRowsParams& params, cudaStream_t stream);

// The CPU reference, on host pointers (`rows` a host array too).
inline void GatherRowsOnHost(const GatherRowsParams& p) {
  for (int32_t t = 0; t < p.tables; ++t) {
    const size_t bytes = static_cast<size_t>(p.row_bytes[t]);
    for (int32_t i = 0; i < p.n; ++i) {
      auto* dst = static_cast<std::byte*>(p.dst[t]) + i * bytes;
      if (p.rows[i] < 0) {
        std::memset(dst, 0, bytes);
      } else {
        std::memcpy(dst, static_cast<const std::byte*>(p.src[t]) + p.rows[i] * bytes, bytes);
      }
    }
  }
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_GATHER_ROWS_H_
