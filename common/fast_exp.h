// exp(x) for float x as a range-reduced polynomial evaluated with fused multiply-adds: a few ulp
// from the true value, branch-free (so loops using it vectorize), and the same bits on every
// machine and on the GPU (fmaf is exactly rounded whether the hardware fuses or not; rintf
// rounds to nearest even). 0 below -87, inf above 88. Usable from CUDA device code.
#ifndef LLM_COMMON_FAST_EXP_H_
#define LLM_COMMON_FAST_EXP_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LLM_FAST_EXP_HD __host__ __device__ __forceinline__
#else
#define LLM_FAST_EXP_HD __attribute__((always_inline)) inline
#endif

namespace llm {

LLM_FAST_EXP_HD float BitsToFloat(int32_t bits) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}

LLM_FAST_EXP_HD float FastExp(float x) {
  // exp(x) = 2^n * exp(r), x = n ln2 + r, |r| <= ln2 / 2; ln2 in two parts for exactness.
  const float xc = fminf(fmaxf(x, -87.0f), 88.0f);
  const float n = rintf(xc * 1.44269504f);
  float r = fmaf(n, -0.693359375f, xc);
  r = fmaf(n, 2.12194440e-4f, r);
  // Degree-6 Taylor polynomial in Horner form.
  float p = 1.0f / 720.0f;
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const float result = p * BitsToFloat((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : (x > 88.0f ? __builtin_huge_valf() : result);
}

}  // namespace llm

#endif  // LLM_COMMON_FAST_EXP_H_
