// mma.sync.m16n8k16 (bf16 in, fp32 accumulate) emulated on the host from the PTX ISA's fragment
// tables, written out independently of kernels/attention/mma_fragment.h, for the tests that run the
// tensor-core kernels lane by lane (prefill_tiles_test.cc, decode_mma_test.cc): a wrong fragment
// index in a kernel's helpers shows up as a wrong result.
#ifndef LLM_TESTS_KERNELS_MMA_EMULATOR_H_
#define LLM_TESTS_KERNELS_MMA_EMULATOR_H_

#include <array>
#include <cstdint>

#include "kernels/attention/mma_fragment.h"
#include "worker/model/dtype.h"

namespace llm::kernels::testing {

using mma::Coord;

// The PTX ISA's fragment tables for mma.m16n8k16 with .bf16 inputs, element by element (a0-a7,
// b0-b3, c0-c3), independent of mma_fragment.h.
inline Coord PtxA(int lane, int i) {
  const int group = lane >> 2, tig = lane % 4;
  const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
  const int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
  return {row, col};
}
inline Coord PtxB(int lane, int i) {
  const int group = lane >> 2, tig = lane % 4;
  return {tig * 2 + (i & 1) + (i >= 2 ? 8 : 0), group};
}
inline Coord PtxC(int lane, int i) {
  const int group = lane >> 2, tig = lane % 4;
  return {i < 2 ? group : group + 8, tig * 2 + (i & 1)};
}

inline uint32_t Pack(uint16_t lo, uint16_t hi) { return lo | (uint32_t{hi} << 16); }
inline float Half(uint32_t reg, int half) {
  return model::Bf16ToF32(static_cast<uint16_t>(half == 0 ? reg & 0xffffu : reg >> 16));
}

// d += a b for one m16n8k16 tile, from the lanes' fragments (PTX tables).
inline void Mma(std::array<std::array<float, 4>, 32>& d,
                const std::array<std::array<uint32_t, 4>, 32>& a,
                const std::array<std::array<uint32_t, 2>, 32>& b) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const Coord at = PtxA(lane, i);
      A[at.row][at.col] = Half(a[lane][i / 2], i % 2);
    }
    for (int i = 0; i < 4; ++i) {
      const Coord at = PtxB(lane, i);
      B[at.row][at.col] = Half(b[lane][i / 2], i % 2);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const Coord at = PtxC(lane, i);
      float acc = d[lane][i];
      for (int k = 0; k < 16; ++k) acc += A[at.row][k] * B[k][at.col];
      d[lane][i] = acc;
    }
  }
}

}  // namespace llm::kernels::testing

#endif  // LLM_TESTS_KERNELS_MMA_EMULATOR_H_
