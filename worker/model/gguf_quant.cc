#include "worker/model/gguf_quant.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/model/gguf.h"

// NOTE: this file is built with -ffp-contract=off (worker/model/CMakeLists.txt): ggml rounds
// `d * q` before adding the min, and a fused multiply-add would differ in the last bit.

namespace llm::model {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF blocks are read in place");

float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return F16ToF32(h);
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One block per call: `b` is the block's bytes, `y` its elements. Each loop has a fixed trip
// count and no data-dependent branches.

// Q4_0 {f16 d; u8 qs[16]}: low nibbles are elements 0..15, high nibbles 16..31; (q - 8) * d.
void BlockQ4_0(const uint8_t* b, float* y) {
  const float d = LoadF16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1 {f16 d, m; u8 qs[16]}: q * d + m.
void BlockQ4_1(const uint8_t* b, float* y) {
  const float d = LoadF16(b);
  const float m = LoadF16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0 {f16 d; u32 qh; u8 qs[16]}: bit j of qh is the fifth bit of element j; (q - 16) * d.
void BlockQ5_0(const uint8_t* b, float* y) {
  const float d = LoadF16(b);
  const uint32_t qh = LoadU32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | static_cast<int>((qh >> j) & 1) << 4;
    const int hi = (qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>(lo - 16) * d;
    y[j + 16] = static_cast<float>(hi - 16) * d;
  }
}

// Q5_1 {f16 d, m; u32 qh; u8 qs[16]}: q * d + m.
void BlockQ5_1(const uint8_t* b, float* y) {
  const float d = LoadF16(b);
  const float m = LoadF16(b + 2);
  const uint32_t qh = LoadU32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | static_cast<int>((qh >> j) & 1) << 4;
    const int hi = (qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

// Q8_0 {f16 d; i8 qs[32]}: q * d.
void BlockQ8_0(const uint8_t* b, float* y) {
  const float d = LoadF16(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// Q2_K {u8 scales[16]; u8 qs[64]; f16 d, dmin}: 16 sub-blocks of 16 with 4-bit scale (low
// nibble) and min (high nibble). Element h*128 + s*32 + l holds bits 2s..2s+1 of qs[h*32 + l].
void BlockQ2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = LoadF16(b + 80);
  const float dmin = LoadF16(b + 82);
  for (int sub = 0; sub < 16; ++sub) {
    const float dl = d * static_cast<float>(scales[sub] & 0xF);
    const float ml = dmin * static_cast<float>(scales[sub] >> 4);
    const int shift = 2 * ((sub / 2) % 4);
    const uint8_t* q = qs + 32 * (sub / 8) + 16 * (sub % 2);
    float* out = y + 16 * sub;
    for (int l = 0; l < 16; ++l) out[l] = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
  }
}

// Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: 16 signed 6-bit scales (low 4 bits in
// scales[0..7], nibble i/8 of scales[i%8]; high 2 bits in scales[8 + i%4], pair i/4), minus 32.
// Element e = h*128 + s*32 + l: 2 low bits from qs[h*32 + l] >> 2s, and 4 is subtracted unless
// bit e/32 of hmask[l] is set.
void BlockQ3_K(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* packed = b + 96;
  const float d = LoadF16(b + 108);
  for (int sub = 0; sub < 16; ++sub) {
    const int low = (packed[sub % 8] >> (4 * (sub / 8))) & 0xF;
    const int high = (packed[8 + sub % 4] >> (2 * (sub / 4))) & 3;
    const float dl = d * static_cast<float>((low | high << 4) - 32);
    const int e0 = 16 * sub;
    const int shift = 2 * ((e0 / 32) % 4);
    const int hbit = e0 / 32;
    const uint8_t* q = qs + 32 * (e0 / 128) + e0 % 32;
    const uint8_t* hm = hmask + e0 % 32;
    for (int l = 0; l < 16; ++l) {
      const int v = ((q[l] >> shift) & 3) - 4 + (((hm[l] >> hbit) & 1) << 2);
      y[e0 + l] = dl * static_cast<float>(v);
    }
  }
}

// The 8 six-bit scales and mins of Q4_K/Q5_K (ggml's get_scale_min_k4): sub-blocks 0..3 keep
// them in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); sub-blocks 4..7 take their low
// 4 bits from the nibbles of bytes 8..11 and their high 2 bits from the top of bytes 0..7.
void UnpackScaleMinK4(const uint8_t* p, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = p[j] & 63;
    mn[j] = p[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((p[j + 8] & 0xF) | (p[j] >> 6) << 4);
    mn[j + 4] = static_cast<uint8_t>((p[j + 8] >> 4) | (p[j + 4] >> 6) << 4);
  }
}

// Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of 32; sub-block 2c + k holds
// nibble k of qs[32c .. 32c + 31]; (d * sc) * q - dmin * m. Q5_K {f16 d, dmin; u8 scales[12];
// u8 qh[32]; u8 qs[128]} adds a fifth bit, bit `sub` of qh[l] (`qh` null for Q4_K).
void BlockQ45_K(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = LoadF16(b);
  const float dmin = LoadF16(b + 2);
  uint8_t sc[8], mn[8];
  UnpackScaleMinK4(b + 4, sc, mn);
  for (int sub = 0; sub < 8; ++sub) {
    const float d1 = d * static_cast<float>(sc[sub]);
    const float m1 = dmin * static_cast<float>(mn[sub]);
    const uint8_t* q = qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    float* out = y + 32 * sub;
    for (int l = 0; l < 32; ++l) {
      const int high = qh == nullptr ? 0 : ((qh[l] >> sub) & 1) << 4;
      out[l] = d1 * static_cast<float>(((q[l] >> shift) & 0xF) | high) - m1;
    }
  }
}

void BlockQ4_K(const uint8_t* b, float* y) { BlockQ45_K(b, nullptr, b + 16, y); }
void BlockQ5_K(const uint8_t* b, float* y) { BlockQ45_K(b, b + 16, b + 48, y); }

// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: element e = h*128 + s*32 + l takes its
// low 4 bits from nibble s/2 of ql[h*64 + (s%2)*32 + l] and its high 2 bits from bits 2s..2s+1
// of qh[h*32 + l]; (d * scale[e/16]) * (q - 32).
void BlockQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = LoadF16(b + 208);
  for (int sub = 0; sub < 16; ++sub) {
    const float dl = d * static_cast<float>(scales[sub]);
    const int e0 = 16 * sub;
    const int h = e0 / 128;
    const int s = (e0 / 32) % 4;
    const uint8_t* lo = ql + 64 * h + 32 * (s % 2) + e0 % 32;
    const uint8_t* hi = qh + 32 * h + e0 % 32;
    const int lo_shift = 4 * (s / 2);
    for (int l = 0; l < 16; ++l) {
      const int v = (((lo[l] >> lo_shift) & 0xF) | ((hi[l] >> (2 * s)) & 3) << 4) - 32;
      y[e0 + l] = dl * static_cast<float>(v);
    }
  }
}

using BlocksFn = void (*)(const uint8_t* src, int64_t num_blocks, float* out);

template <void (*kBlock)(const uint8_t*, float*), int64_t kElements, int64_t kBytes>
void DequantBlocks(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t i = 0; i < num_blocks; ++i) kBlock(src + i * kBytes, out + i * kElements);
}

void CopyF32(const uint8_t* src, int64_t n, float* out) {
  std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
}
void ConvertF16(const uint8_t* src, int64_t n, float* out) {
  ConvertToF32(DType::kF16, reinterpret_cast<const std::byte*>(src), static_cast<size_t>(n), out);
}
void ConvertBf16(const uint8_t* src, int64_t n, float* out) {
  ConvertToF32(DType::kBF16, reinterpret_cast<const std::byte*>(src), static_cast<size_t>(n), out);
}

struct TypeInfo {
  GgufType type;
  const char* name;
  int64_t block_size;  // elements
  int64_t type_size;   // bytes per block
  BlocksFn dequant;    // nullptr: known but not supported
};

template <void (*kBlock)(const uint8_t*, float*), int64_t kElements, int64_t kBytes>
constexpr TypeInfo Quant(GgufType type, const char* name) {
  return {type, name, kElements, kBytes, &DequantBlocks<kBlock, kElements, kBytes>};
}

constexpr int64_t kQK = kGgufQK_K;
// Sizes as in ggml's type traits (gguf-py's GGML_QUANT_SIZES).
constexpr std::array kTypes = {
    TypeInfo{GgufType::kF32, "F32", 1, 4, &CopyF32},
    TypeInfo{GgufType::kF16, "F16", 1, 2, &ConvertF16},
    Quant<BlockQ4_0, 32, 18>(GgufType::kQ4_0, "Q4_0"),
    Quant<BlockQ4_1, 32, 20>(GgufType::kQ4_1, "Q4_1"),
    Quant<BlockQ5_0, 32, 22>(GgufType::kQ5_0, "Q5_0"),
    Quant<BlockQ5_1, 32, 24>(GgufType::kQ5_1, "Q5_1"),
    Quant<BlockQ8_0, 32, 34>(GgufType::kQ8_0, "Q8_0"),
    TypeInfo{GgufType::kQ8_1, "Q8_1", 32, 40, nullptr},
    Quant<BlockQ2_K, kQK, 84>(GgufType::kQ2_K, "Q2_K"),
    Quant<BlockQ3_K, kQK, 110>(GgufType::kQ3_K, "Q3_K"),
    Quant<BlockQ4_K, kQK, 144>(GgufType::kQ4_K, "Q4_K"),
    Quant<BlockQ5_K, kQK, 176>(GgufType::kQ5_K, "Q5_K"),
    Quant<BlockQ6_K, kQK, 210>(GgufType::kQ6_K, "Q6_K"),
    TypeInfo{GgufType::kQ8_K, "Q8_K", kQK, 4 + kQK + kQK / 8, nullptr},
    TypeInfo{GgufType::kIQ2_XXS, "IQ2_XXS", kQK, 2 + kQK / 4, nullptr},
    TypeInfo{GgufType::kIQ2_XS, "IQ2_XS", kQK, 2 + kQK / 4 + kQK / 32, nullptr},
    TypeInfo{GgufType::kIQ3_XXS, "IQ3_XXS", kQK, 2 + kQK / 4 + kQK / 8, nullptr},
    TypeInfo{GgufType::kIQ1_S, "IQ1_S", kQK, 2 + kQK / 8 + kQK / 16, nullptr},
    TypeInfo{GgufType::kIQ4_NL, "IQ4_NL", 32, 18, nullptr},
    TypeInfo{GgufType::kIQ3_S, "IQ3_S", kQK, 2 + kQK / 4 + kQK / 8 + kQK / 32 + 4, nullptr},
    TypeInfo{GgufType::kIQ2_S, "IQ2_S", kQK, 2 + kQK / 4 + kQK / 16, nullptr},
    TypeInfo{GgufType::kIQ4_XS, "IQ4_XS", kQK, 4 + kQK / 2 + kQK / 64, nullptr},
    TypeInfo{GgufType::kI8, "I8", 1, 1, nullptr},
    TypeInfo{GgufType::kI16, "I16", 1, 2, nullptr},
    TypeInfo{GgufType::kI32, "I32", 1, 4, nullptr},
    TypeInfo{GgufType::kI64, "I64", 1, 8, nullptr},
    TypeInfo{GgufType::kF64, "F64", 1, 8, nullptr},
    TypeInfo{GgufType::kIQ1_M, "IQ1_M", kQK, kQK / 8 + kQK / 16 + kQK / 32, nullptr},
    TypeInfo{GgufType::kBF16, "BF16", 1, 2, &ConvertBf16},
    TypeInfo{GgufType::kTQ1_0, "TQ1_0", kQK, 2 + 4 * 13, nullptr},
    TypeInfo{GgufType::kTQ2_0, "TQ2_0", kQK, 2 + 64, nullptr},
    TypeInfo{GgufType::kMXFP4, "MXFP4", 32, 17, nullptr},
    TypeInfo{GgufType::kNVFP4, "NVFP4", 64, 36, nullptr},
    TypeInfo{GgufType::kQ1_0, "Q1_0", 128, 18, nullptr},
};

const TypeInfo* FindType(uint32_t type) {
  for (const TypeInfo& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == type) return &t;
  }
  return nullptr;
}

}  // namespace

std::string GgufTypeName(uint32_t type) {
  const TypeInfo* t = FindType(type);
  return t != nullptr ? std::string(t->name) : absl::StrCat("unknown type ", type);
}

bool GgufTypeSupported(uint32_t type) {
  const TypeInfo* t = FindType(type);
  return t != nullptr && t->dequant != nullptr;
}

int64_t GgufBlockSize(uint32_t type) {
  const TypeInfo* t = FindType(type);
  return t != nullptr ? t->block_size : 0;
}

int64_t GgufTypeSize(uint32_t type) {
  const TypeInfo* t = FindType(type);
  return t != nullptr ? t->type_size : 0;
}

absl::Status DequantizeGguf(uint32_t type, const std::byte* src, int64_t count, float* out) {
  const TypeInfo* t = FindType(type);
  if (t == nullptr || t->dequant == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot dequantise GGUF type ", GgufTypeName(type), " (id ", type, ")"));
  }
  if (count < 0 || count % t->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot dequantise ", count, " elements of ",
                                                   t->name, ": not a whole number of ",
                                                   t->block_size, "-element blocks"));
  }
  t->dequant(reinterpret_cast<const uint8_t*>(src), count / t->block_size, out);
  return absl::OkStatus();
}

absl::Status DequantizeTensor(const GgufTensor& tensor, DType out_dtype, std::string* out_bytes) {
  const uint32_t type = tensor.type;
  const auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF tensor '", tensor.name, "' of type ", GgufTypeName(type), ": ", what));
  };
  if (out_dtype != DType::kF32 && out_dtype != DType::kBF16) {
    return error(absl::StrCat("cannot dequantise to ", std::string(DTypeName(out_dtype))));
  }
  if (!GgufTypeSupported(type)) return error("dequantisation of this type is not supported");
  const int64_t count = tensor.num_elements();
  const int64_t block = GgufBlockSize(type);
  if (count % block != 0 ||
      static_cast<uint64_t>(count / block * GgufTypeSize(type)) != tensor.num_bytes) {
    return error(absl::StrCat(count, " elements do not fill ", tensor.num_bytes, " bytes"));
  }
  if (out_dtype == DType::kF32) {
    out_bytes->resize(static_cast<size_t>(count) * sizeof(float));
    return DequantizeGguf(type, tensor.data, count, reinterpret_cast<float*>(out_bytes->data()));
  }
  // bf16: through an f32 chunk. 8192 is a multiple of every block size.
  constexpr int64_t kChunk = 8192;
  out_bytes->resize(static_cast<size_t>(count) * sizeof(uint16_t));
  std::vector<float> chunk(static_cast<size_t>(std::min(count, kChunk)));
  auto* dst = reinterpret_cast<uint16_t*>(out_bytes->data());
  for (int64_t begin = 0; begin < count; begin += kChunk) {
    const int64_t n = std::min(kChunk, count - begin);
    const std::byte* src = tensor.data + begin / block * GgufTypeSize(type);
    if (auto s = DequantizeGguf(type, src, n, chunk.data()); !s.ok()) return s;
    for (int64_t i = 0; i < n; ++i) dst[begin + i] = F32ToBf16(chunk[static_cast<size_t>(i)]);
  }
  return absl::OkStatus();
}

}  // namespace llm::model
