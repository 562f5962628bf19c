// GGUF tensor element types (ggml's block formats) and their dequantisation to f32.
//
// Block layouts are ggml's (ggml-common.h): a block of `GgufBlockSize(type)` elements takes
// `GgufTypeSize(type)` bytes, little-endian, with no alignment requirement. Quantised blocks
// hold f16 scales and packed integers; dequantisation is elementwise scale * q (+ min), computed
// in f32 in the same order as ggml's reference (`dequantize_row_*`), so results are bit-exact
// with it. Everything here is pure and thread-safe.
#ifndef LLM_WORKER_MODEL_GGUF_QUANT_H_
#define LLM_WORKER_MODEL_GGUF_QUANT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "worker/model/dtype.h"

namespace llm::model {

// ggml type ids as stored in GGUF tensor infos. Ids are raw uint32 in the file; ids missing here
// are unknown.
enum class GgufType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

// Elements per super-block of the K-quants (ggml's QK_K).
inline constexpr int64_t kGgufQK_K = 256;

// "Q4_K", "BF16", ...; "unknown type 99" for an id not listed above.
std::string GgufTypeName(uint32_t type);

// Whether DequantizeGguf handles `type`: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K
// Q5_K Q6_K. Types that are only known (IQ*, Q8_1, ...) can still be sized, so files holding
// them parse; they fail when dequantised.
bool GgufTypeSupported(uint32_t type);

// Elements per block and bytes per block of any known type (0 for an unknown id).
int64_t GgufBlockSize(uint32_t type);
int64_t GgufTypeSize(uint32_t type);

// Dequantises `count` elements (a non-negative multiple of GgufBlockSize(type)) of blocks
// starting at `src` into `out` ([count] f32). INVALID_ARGUMENT, naming the type, for a type that
// is not supported or a count that is not a whole number of blocks.
absl::Status DequantizeGguf(uint32_t type, const std::byte* src, int64_t count, float* out);

struct GgufTensor;  // gguf.h

// Dequantises a whole tensor into `out_bytes` (replaced) as little-endian f32 or bf16
// (`out_dtype` kF32 or kBF16; bf16 rounds to nearest even), element order unchanged.
// INVALID_ARGUMENT naming the tensor and its type when the type is unsupported, the byte size
// does not match the shape, or `out_dtype` is neither.
absl::Status DequantizeTensor(const GgufTensor& tensor, DType out_dtype, std::string* out_bytes);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_GGUF_QUANT_H_
