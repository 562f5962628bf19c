// exp(x) for float x as a range-reduced polynomial evaluated with std::fma: a few ulp from the
// true value, branch-free (so loops using it vectorize), and the same bits on every machine
// (std::fma is exactly rounded whether the CPU has FMA or not). 0 below -87, inf above 88.
#ifndef LLM_COMMON_FAST_EXP_H_
#define LLM_COMMON_FAST_EXP_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace llm {

__attribute__((always_inline)) inline float FastExp(float x) {
  // exp(x) = 2^n * exp(r), x = n ln2 + r, |r| <= ln2 / 2; ln2 in two parts for exactness.
  const float xc = std::fmin(std::fmax(x, -87.0f), 88.0f);
  const float n = std::nearbyint(xc * 1.44269504f);
  float r = std::fma(n, -0.693359375f, xc);
  r = std::fma(n, 2.12194440e-4f, r);
  // Degree-6 Taylor polynomial in Horner form.
  float p = 1.0f / 720.0f;
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const float result = p * scale;
  return x < -87.0f ? 0.0f : (x > 88.0f ? std::numeric_limits<float>::infinity() : result);
}

}  // namespace llm

#endif  // LLM_COMMON_FAST_EXP_H_
