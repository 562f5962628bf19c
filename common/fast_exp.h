// exp(x) for float x as a range-reduced polynomial evaluated with fused multiply-adds: a few ulp
// from the true value, branch-free (so loops using it vectorize), and the same bits on every
// machine and on the GPU (fmaf is exactly rounded whether the hardware fuses or not; rintf
// rounds to nearest even). 0 below -87, inf above 88. Usable from CUDA device code.
#ifndef LLM_COMMON_FAST_EXP_H_
#define LLM_COMMON_FAST_EXP_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#if (defined(__x86_64__) || defined(__i386__)) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

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
  // Clamped with comparisons rather than fminf/fmaxf (which x86 compilers call out to libm);
  // the same values, NaN included (it clamps to -87).
  float xc = x > -87.0f ? x : -87.0f;
  xc = xc < 88.0f ? xc : 88.0f;
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

#if (defined(__x86_64__) || defined(__i386__)) && !defined(__CUDACC__)
// FastExp on eight lanes with AVX2 and FMA: per lane the same operations, so the same bits.
// Call only from code compiled for (or dispatched to) AVX2 and FMA: see CpuHasAvx2Fma().
__attribute__((target("avx2,fma"), always_inline)) inline __m256 FastExp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
  // max_ps(a, b) is a > b ? a : b, so a NaN lane clamps to -87 as in FastExp.
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), xc);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i scale =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
  result = _mm256_blendv_ps(result, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  return _mm256_blendv_ps(result, _mm256_set1_ps(__builtin_huge_valf()),
                          _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
}
#endif

}  // namespace llm

#endif  // LLM_COMMON_FAST_EXP_H_
