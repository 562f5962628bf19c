#include "kernels/common.cuh"
#include "kernels/rope_kv.h"

namespace llm::kernels {
namespace {

// One block per row; threads stride over (head, pair) for q and k heads, then over v.
__global__ void RopeKvKernel(RopeKvParams p) {
  const int32_t r = blockIdx.x;
  const int32_t slot = p.row_slot[r];
  if (slot < 0) return;
  const int32_t pos = p.row_pos[r];
  const int32_t half = p.head_dim / 2;
  const int32_t row_width = (p.num_heads + 2 * p.num_kv_heads) * p.head_dim;
  __nv_bfloat16* row = p.qkv + static_cast<int64_t>(r) * row_width;
  const float* cs = p.cos_table + static_cast<int64_t>(pos) * half;
  const float* sn = p.sin_table + static_cast<int64_t>(pos) * half;
  const int32_t block =
      p.block_tables[static_cast<int64_t>(slot) * p.max_blocks_per_seq + pos / p.block_tokens];
  const int32_t offset = pos % p.block_tokens;
  auto cache_at = [&](__nv_bfloat16* cache, int32_t kv_head) {
    return cache +
           ((static_cast<int64_t>(block) * p.num_kv_heads + kv_head) * p.block_tokens + offset) *
               p.head_dim;
  };
  // q heads and k heads: rotate pair (i, i + half).
  const int32_t rot_heads = p.num_heads + p.num_kv_heads;
  for (int32_t k = threadIdx.x; k < rot_heads * half; k += blockDim.x) {
    const int32_t head = k / half, i = k % half;
    __nv_bfloat16* h = row + head * p.head_dim;
    const float a = ToFloat(h[i]), b = ToFloat(h[i + half]);
    const float ra = a * cs[i] - b * sn[i];
    const float rb = b * cs[i] + a * sn[i];
    if (head < p.num_heads) {
      h[i] = ToBf16(ra);
      h[i + half] = ToBf16(rb);
    } else {
      __nv_bfloat16* dst = cache_at(p.k_cache, head - p.num_heads);
      dst[i] = ToBf16(ra);
      dst[i + half] = ToBf16(rb);
    }
  }
  // v heads are copied as they are.
  const __nv_bfloat16* v = row + rot_heads * p.head_dim;
  for (int32_t k = threadIdx.x; k < p.num_kv_heads * p.head_dim; k += blockDim.x) {
    cache_at(p.v_cache, k / p.head_dim)[k % p.head_dim] = v[k];
  }
}

}  // namespace

cudaError_t LaunchRopeKv(const RopeKvParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  RopeKvKernel<<<p.rows, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace llm::kernels
