// The Hopper prefill kernel's shared-memory layout (kernels/attention/hopper_layout.h) against
// the PTX ISA, on the host: the copy engine's 128-byte swizzle placing a stage's [keys][head_dim]
// K and V box by box, and the tensor cores reading each B operand through the kernel's
// descriptors by the canonical layouts of "Shared Memory Matrix Layout" (written out here from
// the ISA's table, apart from the kernel's arithmetic). Every element of every k-step must be
// the one the product needs: K[n][16 kk + k] for S = Q K^T, V[16 kk + k][64 slab + n] for P V.
#include "kernels/attention/hopper_layout.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace llm::kernels::hopper {
namespace {

// The 128-byte swizzle on a shared-memory byte address (Swizzle<3,4,3>): the 16-byte chunk
// (bits 4-6) XOR the 128-byte row within its 1 KiB (bits 7-9).
uint32_t Swizzle128(uint32_t address) { return address ^ (((address >> 7) & 7u) << 4); }

struct Descriptor {
  uint32_t start, leading, stride, base_offset, swizzle;
};

Descriptor Decode(uint64_t d) {
  return {static_cast<uint32_t>(d & 0x3FFF) << 4, static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4,
          static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4, static_cast<uint32_t>((d >> 49) & 7),
          static_cast<uint32_t>(d >> 62)};
}

// B (16 x 64 of bf16, T = 8 elements in 16 bytes), K-major under the 128-byte swizzle:
// ((8, m), (T, 2k)) : ((8T, SBO), (1, T)). Row n = n0 + 8 n1 of N at n0 rows of 128 bytes and
// n1 strides; k contiguous.
uint32_t KMajorAddress(const Descriptor& d, int n, int k) {
  return Swizzle128(d.start + (n % 8) * 128 + (n / 8) * d.stride + k * 2);
}

// MN-major: ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO)). n = n0 + 8 n1 + 64 n2 contiguous
// within 64 and n2 leading offsets on; k = k0 + 8 k1 at k0 rows of 128 bytes and k1 strides.
uint32_t MnMajorAddress(const Descriptor& d, int k, int n) {
  return Swizzle128(d.start + (n % 64) * 2 + (n / 64) * d.leading + (k % 8) * 128 +
                    (k / 8) * d.stride);
}

// A stage's tile as the copy engine leaves it: box by box (box_rows keys, 64 columns), element
// (r, c) of a box at `dst` landing at Swizzle128(dst + 128 r + 2 c).
void CopyTile(const std::vector<uint16_t>& tile, int32_t D, int32_t box_rows, uint32_t base,
              std::vector<uint16_t>& smem) {
  for (int32_t slab = 0; slab < D / 64; ++slab) {
    for (int32_t j = 0; j < kTileKeys; j += box_rows) {
      const uint32_t dst = base + BoxOffset(slab, j);
      for (int32_t r = 0; r < box_rows; ++r) {
        for (int32_t c = 0; c < kBoxColumns; ++c) {
          smem[Swizzle128(dst + r * kRowBytes + c * 2) / 2] = tile[(j + r) * D + slab * 64 + c];
        }
      }
    }
  }
}

TEST(HopperLayoutTest, DescriptorsReadWhatTheCopyEnginePlaced) {
  constexpr uint32_t kStageBase = 3 * 1024 * 32;  // a later stage: 1 KiB aligned, not 0
  for (const int32_t D : {64, 128}) {
    for (const int32_t box_rows : {8, 16, 32, 64}) {
      // Every element distinct: its index.
      std::vector<uint16_t> k(static_cast<size_t>(kTileKeys) * D), v(k.size());
      for (size_t i = 0; i < k.size(); ++i) {
        k[i] = static_cast<uint16_t>(i);
        v[i] = static_cast<uint16_t>(i + 20000);
      }
      const uint32_t k_tile = kStageBase, v_tile = kStageBase + (D / 64) * kSlabBytes;
      std::vector<uint16_t> smem(static_cast<size_t>(v_tile + (D / 64) * kSlabBytes) / 2, 0xFFFF);
      CopyTile(k, D, box_rows, k_tile, smem);
      CopyTile(v, D, box_rows, v_tile, smem);
      for (int32_t kk = 0; kk < D / 16; ++kk) {
        const Descriptor d = Decode(KStepDescriptor(k_tile, kk));
        ASSERT_EQ(d.swizzle, 1u);
        ASSERT_EQ(d.base_offset, 0u);
        for (int n = 0; n < 64; ++n) {
          for (int kx = 0; kx < 16; ++kx) {
            ASSERT_EQ(smem[KMajorAddress(d, n, kx) / 2], k[n * D + kk * 16 + kx])
                << "K, D " << D << ", box " << box_rows << ", k-step " << kk << ", key " << n
                << ", column " << kx;
          }
        }
      }
      for (int32_t slab = 0; slab < D / 64; ++slab) {
        for (int32_t kk = 0; kk < kTileKeys / 16; ++kk) {
          const Descriptor d = Decode(VStepDescriptor(v_tile, slab, kk));
          ASSERT_EQ(d.swizzle, 1u);
          for (int kx = 0; kx < 16; ++kx) {
            for (int n = 0; n < 64; ++n) {
              ASSERT_EQ(smem[MnMajorAddress(d, kx, n) / 2], v[(kk * 16 + kx) * D + slab * 64 + n])
                  << "V, D " << D << ", box " << box_rows << ", slab " << slab << ", k-step " << kk
                  << ", key " << kx << ", column " << n;
            }
          }
        }
      }
    }
  }
}

// The descriptor's fields: 14 bits each of address, leading and stride offsets in 16-byte
// units, the swizzle mode in the top two bits.
TEST(HopperLayoutTest, DescriptorFields) {
  const uint64_t d = SwizzledDescriptor(0x12340, 0x2000, 0x400);
  EXPECT_EQ(d & 0x3FFF, 0x1234u);
  EXPECT_EQ((d >> 16) & 0x3FFF, 0x200u);
  EXPECT_EQ((d >> 32) & 0x3FFF, 0x40u);
  EXPECT_EQ(d >> 62, 1u);
  EXPECT_EQ((d >> 49) & 7, 0u);
}

}  // namespace
}  // namespace llm::kernels::hopper
