// Where the elements of a warp's tensor-core operands live: the register fragments of
// mma.sync.m16n8k16 (bf16 in, fp32 accumulate) and the row each lane addresses for ldmatrix
// .x4. Plain index arithmetic shared by the device code and the host tests that emulate it
// (tests/kernels/prefill_tiles_test.cc); the layouts are the PTX ISA's ("Matrix fragments for
// mma.m16n8k16", "ldmatrix").
//
// A lane's `group` is lane / 4 and its `quad` lane % 4. Each 32-bit register of A and B holds
// two bf16 that are adjacent along k (element `half` 0 in the low 16 bits).
#ifndef LLM_KERNELS_ATTENTION_MMA_FRAGMENT_H_
#define LLM_KERNELS_ATTENTION_MMA_FRAGMENT_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels::mma {

struct Coord {
  int32_t row;
  int32_t col;
};

// A (16 x 16, row major), registers 0-3: rows group and group + 8, k columns quad * 2 + half
// and 8 further.
__host__ __device__ inline Coord FragA(int32_t lane, int32_t reg, int32_t half) {
  return {lane / 4 + 8 * (reg % 2), (lane % 4) * 2 + 8 * (reg / 2) + half};
}

// Which of a lane's two rows (group, group + 8) register `reg` of A holds: known at compile
// time, where FragA's row is not (it depends on the lane).
__host__ __device__ constexpr int32_t RowHalfA(int32_t reg) { return reg % 2; }

// B (16 x 8, k by n), registers 0-1: column group, k rows quad * 2 + half and 8 further.
__host__ __device__ inline Coord FragB(int32_t lane, int32_t reg, int32_t half) {
  return {(lane % 4) * 2 + 8 * reg + half, lane / 4};
}

// C and D (16 x 8, fp32), elements 0-3: rows group and group + 8, columns quad * 2 + (i % 2).
__host__ __device__ inline Coord FragC(int32_t lane, int32_t i) {
  return {lane / 4 + 8 * (i / 2), (lane % 4) * 2 + i % 2};
}

// Which of a lane's two rows element `i` of C holds.
__host__ __device__ constexpr int32_t RowHalfC(int32_t i) { return i / 2; }

// ldmatrix .x4 loads four 8 x 8 b16 matrices; lanes 8i to 8i + 7 give the addresses of the rows
// of matrix i, and register i of every lane receives its part of matrix i.
//
// K stored [key][dim] (a tile of keys, D dims each), read without .trans as the B operand of
// S = Q K^T for keys [n0, n0 + 16) and dims [k0, k0 + 16): registers 0-1 are the B fragment of
// keys n0..n0+7, registers 2-3 that of keys n0+8..n0+15. Returns the (key, dim) whose row this
// lane addresses.
__host__ __device__ inline Coord LdmatrixKeyRow(int32_t lane, int32_t n0, int32_t k0) {
  const int32_t matrix = lane / 8, r = lane % 8;
  return {n0 + r + 8 * (matrix / 2), k0 + 8 * (matrix % 2)};
}

// V stored [key][dim], read with .trans as the B operand of O = P V for keys [k0, k0 + 16) and
// dims [n0, n0 + 16): registers 0-1 are the B fragment of dims n0..n0+7, registers 2-3 that of
// dims n0+8..n0+15. Returns the (key, dim) whose row this lane addresses.
__host__ __device__ inline Coord LdmatrixValueRow(int32_t lane, int32_t k0, int32_t n0) {
  const int32_t matrix = lane / 8, r = lane % 8;
  return {k0 + r + 8 * (matrix % 2), n0 + 8 * (matrix / 2)};
}

}  // namespace llm::kernels::mma

#endif  // LLM_KERNELS_ATTENTION_MMA_FRAGMENT_H_
