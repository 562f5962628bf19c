// Element types of checkpoint tensors and conversions between them.
#ifndef LLM_WORKER_MODEL_DTYPE_H_
#define LLM_WORKER_MODEL_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace llm::model {

// The safetensors dtypes. Only kF32, kF16 and kBF16 can hold weights; the others are known so
// that a file holding them is parsed (and sized) correctly and rejected by name when used.
enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3, kF8E5M2 };

// "F32", "BF16", ... as written in safetensors headers; nullopt for an unknown name.
std::optional<DType> ParseDType(std::string_view name);
std::string_view DTypeName(DType dtype);
size_t DTypeSize(DType dtype);
inline bool IsWeightDType(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

inline float Bf16ToF32(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float f);  // round to nearest even, saturating to inf

// Converts `count` elements of a weight dtype (kF32, kF16, kBF16) at `src` (any alignment) to
// fp32.
void ConvertToF32(DType dtype, const std::byte* src, size_t count, float* dst);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_DTYPE_H_
