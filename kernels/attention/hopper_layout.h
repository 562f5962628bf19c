// Where the Hopper prefill kernel (prefill_attention_sm90.cu) keeps a stage's K and V in shared
// memory, and the wgmma descriptors it reads them through: plain arithmetic shared by the
// device code and the host test that emulates the copy engine's placement and the tensor
// cores' reads from the PTX ISA's tables (tests/kernels/hopper_layout_test.cc).
//
// A stage's K (or V) tile is head_dim / 64 slabs; a slab is the tile's 64 keys by 64 columns,
// rows of 128 bytes under the 128-byte swizzle, 1 KiB aligned. The copy engine fills a slab box
// by box (a box: `box_rows` keys, one cache block or 64 keys of one).
#ifndef LLM_KERNELS_ATTENTION_HOPPER_LAYOUT_H_
#define LLM_KERNELS_ATTENTION_HOPPER_LAYOUT_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels::hopper {

inline constexpr int32_t kTileKeys = 64;                      // keys of a stage
inline constexpr int32_t kRowBytes = 128;                     // a swizzled row: 64 bf16
inline constexpr int32_t kBoxColumns = kRowBytes / 2;         // bf16 columns of a box
inline constexpr int32_t kSlabBytes = kTileKeys * kRowBytes;  // 64 keys by 64 columns
inline constexpr int32_t kAtomBytes = 8 * kRowBytes;          // the swizzle's 8-row atom

// Byte offset, within a K or V tile, of the box holding keys [j, j + box rows) of columns
// [64 slab, 64 slab + 64).
__host__ __device__ constexpr uint32_t BoxOffset(int32_t slab, int32_t j) {
  return static_cast<uint32_t>(slab * kSlabBytes + j * kRowBytes);
}

// The descriptor of a shared-memory operand under the 128-byte swizzle (PTX ISA, "Matrix
// Descriptor Format"): start address, leading- and stride-dimension byte offsets (each >> 4, 14
// bits), base offset 0 (atoms 1 KiB aligned), swizzle mode 1 (128 bytes).
__host__ __device__ constexpr uint64_t SwizzledDescriptor(uint32_t address, uint32_t leading,
                                                          uint32_t stride) {
  return ((address & 0x3FFFFu) >> 4) | (static_cast<uint64_t>((leading & 0x3FFFFu) >> 4) << 16) |
         (static_cast<uint64_t>((stride & 0x3FFFFu) >> 4) << 32) | (uint64_t{1} << 62);
}

// S = Q K^T, k-step kk (columns [16 kk, 16 kk + 16)): B is K-major (a key's columns
// contiguous), 32 bytes into a row per k-step, four to a slab; 8-row groups an atom apart (the
// leading offset is unused with a swizzle).
__host__ __device__ constexpr uint64_t KStepDescriptor(uint32_t k_tile, int32_t kk) {
  return SwizzledDescriptor(k_tile + static_cast<uint32_t>((kk / 4) * kSlabBytes + (kk % 4) * 32),
                            16, kAtomBytes);
}

// O += P V, keys [16 kk, 16 kk + 16) and columns [64 slab, 64 slab + 64): B is MN-major (a key's
// columns contiguous along N; the transpose bit set), 16 rows per k-step; 8-key groups an atom
// apart (stride), 64-column groups a slab apart (leading; unused at N = 64).
__host__ __device__ constexpr uint64_t VStepDescriptor(uint32_t v_tile, int32_t slab, int32_t kk) {
  return SwizzledDescriptor(v_tile + static_cast<uint32_t>(slab * kSlabBytes + kk * 16 * kRowBytes),
                            kSlabBytes, kAtomBytes);
}

}  // namespace llm::kernels::hopper

#endif  // LLM_KERNELS_ATTENTION_HOPPER_LAYOUT_H_
