// FP8 E4M3 (the OCP "e4m3fn" of PyTorch's float8_e4m3fn and safetensors' F8_E4M3): 1 sign, 4
// exponent (bias 7) and 3 mantissa bits; no infinities; 0x7F and 0xFF are NaN; the largest
// finite magnitude is 448 (0x7E). Header-only and usable from CUDA device code, so the host's
// quantiser, the CPU reference and the kernels round the same way.
//
// Rounding (Fp8E4M3FromFloat): to nearest, ties to even, saturating: every magnitude at or above
// 448 (infinity included) becomes 448, as PTX's cvt.rn.satfinite.e4m3x2.f32 and PyTorch's
// x.clamp(-448, 448).to(float8_e4m3fn) do; NaN stays NaN.
//
// Scales (the convention of every FP8 checkpoint format we read): a quantised value q stands
// for Fp8E4M3ToFloat(q) * scale, and a group of values is quantised with scale = amax / 448
// (Fp8ScaleForAmax), dividing each value by the scale before rounding.
#ifndef LLM_COMMON_FP8_H_
#define LLM_COMMON_FP8_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LLM_FP8_HOST_DEVICE __host__ __device__
#else
#define LLM_FP8_HOST_DEVICE
#endif

namespace llm {

inline constexpr float kFp8E4M3Max = 448.0f;
// The smallest scale a group is given (an all-zero group, or one of tiny values): quantising
// with it keeps every product finite. The value vLLM's dynamic quantisation clamps to.
inline constexpr float kFp8MinScale = 1.0f / (kFp8E4M3Max * 512.0f);

LLM_FP8_HOST_DEVICE inline uint32_t Fp8FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

LLM_FP8_HOST_DEVICE inline float Fp8BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// The value of an E4M3 byte (exact in fp32).
LLM_FP8_HOST_DEVICE inline float Fp8E4M3ToFloat(uint8_t q) {
  const uint32_t sign = static_cast<uint32_t>(q & 0x80u) << 24;
  const uint32_t exp = (q >> 3) & 0xFu, mant = q & 0x7u;
  if ((q & 0x7Fu) == 0x7Fu) return Fp8BitsFloat(sign | 0x7FC00000u);  // NaN
  if (exp == 0) {
    // Subnormal: mant * 2^-9.
    const float v = static_cast<float>(mant) * (1.0f / 512.0f);
    return sign != 0 ? -v : v;
  }
  return Fp8BitsFloat(sign | ((exp + 120u) << 23) | (mant << 20));
}

// fp32 to E4M3: round to nearest even, saturating to +-448 (infinities too); NaN to 0x7F.
LLM_FP8_HOST_DEVICE inline uint8_t Fp8E4M3FromFloat(float f) {
  const uint32_t u = Fp8FloatBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);   // NaN
  if (a >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // >= 448: saturate
  if (a < 0x3C800000u) {
    // Below the smallest normal (2^-6): a multiple of 2^-9. |f| * 512 is exact; round it to an
    // integer 0..8 with ties to even (8 is the smallest normal, 0x08).
    const float scaled = Fp8BitsFloat(a) * 512.0f;
    const uint32_t whole = static_cast<uint32_t>(scaled);
    const float frac = scaled - static_cast<float>(whole);
    uint32_t q = whole;
    if (frac > 0.5f || (frac == 0.5f && (whole & 1u) != 0)) ++q;
    return static_cast<uint8_t>(sign | q);
  }
  // Normal: keep 3 of the 23 mantissa bits, rounding the 20 dropped to nearest even (a carry
  // into the exponent is the right result).
  const uint32_t r = a + 0x7FFFFu + ((a >> 20) & 1u);
  const uint32_t exp = (r >> 23) - 120u, mant = (r >> 20) & 0x7u;
  return static_cast<uint8_t>(sign | (exp << 3) | mant);
}

// The scale of a group whose largest magnitude is `amax`: amax / 448, at least kFp8MinScale.
LLM_FP8_HOST_DEVICE inline float Fp8ScaleForAmax(float amax) {
  const float s = amax / kFp8E4M3Max;
  return s > kFp8MinScale ? s : kFp8MinScale;
}

// x quantised with `scale` and back: what an FP8 product sees of x.
LLM_FP8_HOST_DEVICE inline float Fp8RoundTrip(float x, float scale) {
  return Fp8E4M3ToFloat(Fp8E4M3FromFloat(x / scale)) * scale;
}

}  // namespace llm

#endif  // LLM_COMMON_FP8_H_
