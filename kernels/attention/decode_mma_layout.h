// Where the tensor-core decode attention (kernels/attention/attention_mma.cu) puts K, V and Q in
// the registers of mma.m16n8k16 (bf16 in, or half for an FP8 cache; fp32 accumulate;
// mma_fragment.h has the PTX layouts), loading them 8 elements at a time straight from the
// paged cache (16 bytes of bf16, or 8 of E4M3 converted to half in registers: kv_load.cuh): no
// shared memory, no ldmatrix.
// Plain index arithmetic shared by the kernel and the host test that emulates it lane by lane
// (tests/kernels/decode_mma_test.cc).
//
// A warp takes kDecodeTileKeys keys at a time. S = Q K^T has the group's query heads as the 16
// rows of A (at most 8 heads: rows 8-15 are zero) and the tile's keys as two n tiles of 8 (B);
// O += P V has P (S's C fragments, rounded to bf16 or half) as A and V as B. Two freedoms make
// every bf16 load 16 contiguous bytes:
// - A dot product may add its dims in any order so long as Q and K use the same one: in
//   k-steps 2b and 2b + 1, a lane's A and B registers hold the 8 consecutive dims
//   [32 b + 8 quad, 32 b + 8 quad + 8) of its head (Q) or key (K), one 16-byte load.
// - O's columns may be any permutation of the dims: column c of n tile j is dim
//   c * (D / 8) + j, so the V elements a lane needs for all D / 8 n tiles are the D / 8
//   consecutive dims from (lane / 4) * (D / 8) of each of its four keys.
// A lane's `group` is lane / 4 and its `quad` lane % 4.
#ifndef LLM_KERNELS_ATTENTION_DECODE_MMA_LAYOUT_H_
#define LLM_KERNELS_ATTENTION_DECODE_MMA_LAYOUT_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels::decode_mma {

// Keys a warp handles at a time: one k-step of P V, two n tiles of S.
inline constexpr int32_t kDecodeTileKeys = 16;
// Query heads per KV head the layout holds (the rows group of A; rows group + 8 stay zero).
inline constexpr int32_t kMaxGroup = 8;

struct KeyDims {
  int32_t key;  // within the tile
  int32_t dim;  // the first of 8 consecutive dims
};

// The K load `block` (dims [32 block, 32 block + 32) of the head) of n tile `ntile` (keys
// [8 ntile, 8 ntile + 8)): this lane reads key 8 ntile + group, 8 dims. Q's load `block` of
// head `group` covers the same dims.
__host__ __device__ inline KeyDims KeyLoad(int32_t lane, int32_t ntile, int32_t block) {
  return {8 * ntile + lane / 4, 32 * block + 8 * (lane % 4)};
}

// Which 32-bit word of a K (or Q) load holds k-step kk's half `khalf` (0: the B register 0 and
// A registers 0-1, k in [0, 8); 1: B register 1, A registers 2-3, k in [8, 16)). The load is
// that of block kk / 2.
__host__ __device__ constexpr int32_t DimWord(int32_t kk, int32_t khalf) {
  return (kk % 2) * 2 + khalf;
}

// The key (within the tile) of a lane's V load `i` (0-3): B register 0 takes keys 2 quad and
// 2 quad + 1 (loads 0 and 1), register 1 keys 2 quad + 8 and 2 quad + 9 (loads 2 and 3).
__host__ __device__ inline int32_t ValueKey(int32_t lane, int32_t i) {
  return 2 * (lane % 4) + i % 2 + 8 * (i / 2);
}

// The first of the D / 8 consecutive dims a lane reads of each of its V keys.
__host__ __device__ inline int32_t ValueDim(int32_t lane, int32_t head_dim) {
  return lane / 4 * (head_dim / 8);
}

// The dim of O's C element `i` (0-3) of n tile `ntile` held by `lane`.
__host__ __device__ inline int32_t OutputDim(int32_t lane, int32_t ntile, int32_t i,
                                             int32_t head_dim) {
  return (2 * (lane % 4) + i % 2) * (head_dim / 8) + ntile;
}

// Where the block's merge keeps dim `d` of head row `row` (warp * kMaxGroup + head) of a
// warp's O in shared memory: rows of D + 9 floats, one float of padding after each D / 8 dims,
// so a warp's stores of one n tile's C elements (dims c * D / 8 + j for the 8 columns c, rows
// `group`) fall into distinct banks but for a few pairs, and reads of consecutive dims stay
// consecutive but for the padding.
__host__ __device__ constexpr int32_t WarpOutputIndex(int32_t row, int32_t d, int32_t head_dim) {
  return row * (head_dim + 9) + d + d / (head_dim / 8);
}

// The bf16 `e` of a run of bf16 held as 32-bit words (element 0 in word 0's low 16 bits).
__host__ __device__ inline uint32_t Bf16At(const uint32_t* words, int32_t e) {
  const uint32_t w = words[e / 2];
  return e % 2 == 0 ? (w & 0xffffu) : (w >> 16);
}

// B register of V for n tile `ntile`: the lane's element `ntile` of two of its V loads (the
// lower key in the low half), each given as its D / 8 dims in words.
__host__ __device__ inline uint32_t ValueRegister(const uint32_t* lower_key,
                                                  const uint32_t* upper_key, int32_t ntile) {
  return Bf16At(lower_key, ntile) | (Bf16At(upper_key, ntile) << 16);
}

}  // namespace llm::kernels::decode_mma

#endif  // LLM_KERNELS_ATTENTION_DECODE_MMA_LAYOUT_H_
