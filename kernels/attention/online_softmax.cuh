// The masked online softmax of one tile of scores, shared by the prefill attention kernels
// (prefill_attention.cu, prefill_attention_sm90.cu): S as kTiles m16n8 C fragments (8 keys
// each, mma_fragment.h FragC) of a warp's 16 rows, a lane holding rows `group` and `group + 8`.
#ifndef LLM_KERNELS_ATTENTION_ONLINE_SOFTMAX_CUH_
#define LLM_KERNELS_ATTENTION_ONLINE_SOFTMAX_CUH_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention/mma.cuh"
#include "kernels/attention/mma_fragment.h"
#include "kernels/attention/prefill_attention.h"

namespace llm::kernels {

// In log2 units: S (keys [key0, key0 + 8 kTiles)) scaled, masked where `cover` is kMasked (a
// lane's row at row_pos[h], -1 for padding, sees PrefillSees' keys), becomes P unnormalised;
// the rows' running max and sum move on, and `alpha` is what rescales O.
template <int kTiles>
__device__ __forceinline__ void MaskedSoftmaxTile(float (&s)[kTiles][4],
                                                  const int32_t (&row_pos)[2], int lane,
                                                  int32_t key0, TileCover cover, int32_t window,
                                                  float scale_log2, float (&row_max)[2],
                                                  float (&row_sum)[2], float (&alpha)[2]) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kTiles; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int h = mma::RowHalfC(i);
      float v = s[n][i] * scale_log2;
      if (cover == TileCover::kMasked &&
          !(row_pos[h] >= 0 &&
            PrefillSees(row_pos[h], key0 + n * 8 + mma::FragC(lane, i).col, window))) {
        v = -INFINITY;
      }
      s[n][i] = v;
      tile_max[h] = fmaxf(tile_max[h], v);
    }
  }
  float base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m_new = fmaxf(row_max[h], QuadMax(tile_max[h]));
    // A row that has seen nothing yet keeps -inf; subtract 0 then so exp2 gives 0, not NaN.
    base[h] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = exp2f(row_max[h] - base[h]);
    row_max[h] = m_new;
  }
  float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < kTiles; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int h = mma::RowHalfC(i);
      s[n][i] = exp2f(s[n][i] - base[h]);
      tile_sum[h] += s[n][i];
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) row_sum[h] = row_sum[h] * alpha[h] + QuadSum(tile_sum[h]);
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_ONLINE_SOFTMAX_CUH_
