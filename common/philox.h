// Philox4x32-10, a counter-based random generator (Salmon et al., SC'11). A request's random
// numbers are a pure function of (seed, counter), so sampling does not depend on what else is
// in the batch or on which device runs it. Header-only and usable from CUDA device code.
#ifndef LLM_COMMON_PHILOX_H_
#define LLM_COMMON_PHILOX_H_

#include <cstdint>

#if defined(__CUDACC__)
#define LLM_HOST_DEVICE __host__ __device__
#else
#define LLM_HOST_DEVICE
#endif

namespace llm {

struct Philox4x32 {
  uint32_t v[4];
};

LLM_HOST_DEVICE inline Philox4x32 Philox4x32x10(uint64_t counter_lo, uint64_t counter_hi,
                                                uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

// A uniform double in [0, 1) from 53 random bits of Philox(seed; counter).
LLM_HOST_DEVICE inline double UniformDouble(uint64_t seed, uint64_t counter, uint64_t stream = 0) {
  const Philox4x32 r = Philox4x32x10(counter, stream, seed);
  const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 21) ^ (r.v[1] >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// SplitMix64 finaliser: a fast 64-bit hash, used to derive per-tensor streams.
LLM_HOST_DEVICE inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace llm

#endif  // LLM_COMMON_PHILOX_H_
