// The fixed-order float sums of the CPU math: eight lanes (element i in lane i % 8, in order),
// then one tree over the lanes. A vector loop keeping eight lanes in a register and the scalar
// loop below give the same bits, so a sum never depends on the CPU or on how it was vectorised.
#ifndef LLM_COMMON_LANE_SUM_H_
#define LLM_COMMON_LANE_SUM_H_

#include <cstddef>

namespace llm {

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
inline float LaneTree(const float* lane) {
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// The sum of x[0, n): element i added to lane i % 8 in order, then LaneTree.
inline float LaneSum(const float* x, size_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) lane[i % 8] += x[i];
  return LaneTree(lane);
}

}  // namespace llm

#endif  // LLM_COMMON_LANE_SUM_H_
