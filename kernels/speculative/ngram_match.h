// The n-gram (prompt-lookup) proposal rule of worker/speculative/ngram.h, restated so that a
// block of threads can apply it in parallel: host and device code over a plain token history,
// so the host tests hold the device's rule to the CPU proposer's.
//
// For a history h of length len and a suffix length n, the starts i in [0, len - n) whose n
// tokens equal the last n are candidates; one is followed by min(k, len - n - i) tokens. The
// CPU proposer takes the latest candidate followed by k tokens, else the one followed by the
// most. Starts at or before len - n - k are followed by k tokens and later ones by fewer, fewer
// the later they are, so that is: the largest candidate i <= len - n - k if there is one, else
// the smallest candidate. Each thread folds its candidates into an NgramBest (a maximum and a
// minimum, reduced in any order), and NgramPick reads the answer off it.
#ifndef LLM_KERNELS_SPECULATIVE_NGRAM_MATCH_H_
#define LLM_KERNELS_SPECULATIVE_NGRAM_MATCH_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

inline constexpr int32_t kNoNgramStart = 0x7fffffff;

struct NgramBest {
  int32_t full = -1;                // the largest candidate followed by k tokens, or -1
  int32_t partial = kNoNgramStart;  // the smallest candidate followed by fewer
};

struct NgramChoice {
  int32_t start;  // the proposals are h[start, start + count)
  int32_t count;  // 0: no candidate
};

// Whether h[i, i + n) equals h[len - n, len).
__host__ __device__ inline bool NgramMatchesAt(const int32_t* h, int32_t len, int32_t n,
                                               int32_t i) {
  for (int32_t t = 0; t < n; ++t) {
    if (h[i + t] != h[len - n + t]) return false;
  }
  return true;
}

// Folds candidate start i (a match) into `best`, for k proposals wanted.
__host__ __device__ inline void NgramFold(NgramBest& best, int32_t len, int32_t n, int32_t k,
                                          int32_t i) {
  if (i <= len - n - k) {
    if (i > best.full) best.full = i;
  } else if (i < best.partial) {
    best.partial = i;
  }
}

__host__ __device__ inline NgramChoice NgramPick(const NgramBest& best, int32_t len, int32_t n,
                                                 int32_t k) {
  if (best.full >= 0) return {best.full + n, k};
  if (best.partial != kNoNgramStart) return {best.partial + n, len - n - best.partial};
  return {0, 0};
}

// The suffix lengths tried, longest first: from min(max_n, len - 1) down to min_n (at least 1).
__host__ __device__ inline int32_t NgramLongest(int32_t len, int32_t max_n) {
  return max_n < len - 1 ? max_n : len - 1;
}
__host__ __device__ inline int32_t NgramShortest(int32_t min_n) { return min_n > 1 ? min_n : 1; }

// The whole rule, one thread: up to k proposals for what follows h[0, len), written to `out`;
// returns their count. What the device's proposer computes with a block per slot.
__host__ __device__ inline int32_t ProposeNgramSerial(const int32_t* h, int32_t len, int32_t min_n,
                                                      int32_t max_n, int32_t k, int32_t* out) {
  if (k <= 0) return 0;
  for (int32_t n = NgramLongest(len, max_n); n >= NgramShortest(min_n); --n) {
    NgramBest best;
    for (int32_t i = 0; i < len - n; ++i) {
      if (NgramMatchesAt(h, len, n, i)) NgramFold(best, len, n, k, i);
    }
    const NgramChoice c = NgramPick(best, len, n, k);
    if (c.count > 0) {
      for (int32_t t = 0; t < c.count; ++t) out[t] = h[c.start + t];
      return c.count;
    }
  }
  return 0;
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_SPECULATIVE_NGRAM_MATCH_H_
