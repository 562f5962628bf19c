// The Hopper prefill attention kernel (prefill_attention_sm90.h) against the double reference
// (prefill_reference.h), the tiled kernel's cases and issue 31's: prompts of 1, 63, 64, 65,
// 1,000, 4,096 and 16,384 tokens; chunks that start inside a block and after cached ones; head
// dims 64 and 128; groups 1, 4, 7 and 8; with and without a sliding window; cache blocks of 8 to
// 256 tokens (one copy box per block, or 64 keys of one). Each test skips with the reason on
// anything but a device of compute capability 9.0.
#include "kernels/attention/prefill_attention_sm90.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/attention/prefill_attention.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/prefill_reference.h"

namespace llm::kernels {
namespace {

using namespace llm::kernels::testing;

#define LLM_REQUIRE_HOPPER()                                                                   \
  do {                                                                                         \
    LLM_REQUIRE_GPU();                                                                         \
    cudaDeviceProp prop{};                                                                     \
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);                                 \
    if (!HopperPrefillSupported(prop.major, prop.minor, 128, 16, false)) {                     \
      GTEST_SKIP() << "Hopper test skipped: device " << prop.name << " is compute capability " \
                   << prop.major << "." << prop.minor << ", the kernel needs 9.0";             \
    }                                                                                          \
  } while (0)

// Runs `l` through LaunchPrefillAttention with the Hopper kernel's maps (hopper) or without
// (the tiled kernel); the output rows as floats.
std::vector<float> RunPrefill(const Launch& l, bool hopper) {
  std::vector<PrefillTile> tiles;
  PlanPrefillTiles(l.chunks, l.G, tiles);
  DeviceBuffer<uint16_t> d_k(l.k), d_v(l.v), d_qkv(l.qkv);
  DeviceBuffer<__nv_bfloat16> d_out(static_cast<size_t>(l.rows) * l.H() * l.D);
  DeviceBuffer<int32_t> d_tables(l.tables);
  DeviceBuffer<PrefillChunk> d_chunks(l.chunks);
  DeviceBuffer<PrefillTile> d_tiles(tiles);
  PrefillAttentionParams p = l.Params();
  p.qkv = reinterpret_cast<const __nv_bfloat16*>(d_qkv.get());
  p.k_cache = d_k.get();
  p.v_cache = d_v.get();
  p.block_tables = d_tables.get();
  p.chunks = d_chunks.get();
  p.tiles = d_tiles.get();
  p.num_tiles = static_cast<int32_t>(tiles.size());
  p.out = d_out.get();
  PrefillTensorMaps maps;
  if (hopper) {
    const int64_t blocks = static_cast<int64_t>(l.k.size()) / (int64_t{l.KV} * l.bt * l.D);
    EXPECT_EQ(MakePrefillTensorMaps(p.k_cache, p.v_cache, blocks, l.KV, l.bt, l.D, &maps),
              cudaSuccess);
    EXPECT_EQ(PrepareHopperPrefillAttention(l.D), cudaSuccess);
    p.tma = &maps;
  } else {
    EXPECT_EQ(PreparePrefillAttention(l.D), cudaSuccess);
  }
  EXPECT_EQ(LaunchPrefillAttention(p, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return FromBf16Vector(d_out.Download());
}

TEST(HopperPrefillAttentionTest, SeveralSequencesHeadSizesAndGroups) {
  LLM_REQUIRE_HOPPER();
  // Prompts of 1, 15 and 17 tokens, chunks that continue earlier ones mid-block, scattered
  // blocks, several sequences in one launch.
  const std::vector<Seq> seqs = {{0, 1}, {0, 15}, {0, 17}, {40, 17}, {203, 70}, {5, 1}};
  uint32_t seed = 1;
  for (const int32_t D : {64, 128}) {
    for (const int32_t G : {1, 4, 7, 8}) {
      const Launch l = MakeLaunch(D, G, G == 8 ? 1 : 2, 0, seqs, seed++);
      ExpectMatchesReference(l, RunPrefill(l, true), "several sequences");
    }
  }
}

TEST(HopperPrefillAttentionTest, PromptLengthsAroundTheTiles) {
  LLM_REQUIRE_HOPPER();
  uint32_t seed = 20;
  for (const int32_t tokens : {1, 63, 64, 65, 1000}) {
    for (const int32_t G : {1, 4, 7, 8}) {
      const Launch l = MakeLaunch(128, G, 2, 0, {{0, tokens}}, seed++);
      ExpectMatchesReference(l, RunPrefill(l, true), (std::to_string(tokens) + " tokens").c_str());
    }
  }
}

TEST(HopperPrefillAttentionTest, SlidingWindowAndCachedPrefixes) {
  LLM_REQUIRE_HOPPER();
  const std::vector<Seq> seqs = {{0, 150}, {90, 60}, {300, 33}, {517, 200}};
  uint32_t seed = 50;
  for (const int32_t window : {0, 1, 37, 64, 100}) {
    for (const int32_t D : {64, 128}) {
      for (const int32_t G : {4, 7}) {
        const Launch l = MakeLaunch(D, G, 2, window, seqs, seed++);
        ExpectMatchesReference(l, RunPrefill(l, true), "window / cached prefix");
      }
    }
  }
}

TEST(HopperPrefillAttentionTest, CacheBlocksOfEverySupportedSize) {
  LLM_REQUIRE_HOPPER();
  const std::vector<Seq> seqs = {{0, 130}, {77, 64}, {250, 9}};
  uint32_t seed = 90;
  for (const int32_t bt : {8, 16, 32, 64, 128, 256}) {
    const Launch l = MakeLaunch(128, 4, 2, 0, seqs, seed++, bt);
    ExpectMatchesReference(l, RunPrefill(l, true), ("block of " + std::to_string(bt)).c_str());
  }
}

TEST(HopperPrefillAttentionTest, LongPrompts) {
  LLM_REQUIRE_HOPPER();
  const Launch l4k = MakeLaunch(128, 4, 2, 0, {{0, 4096}}, 100);
  ExpectMatchesReference(l4k, RunPrefill(l4k, true), "4,096 tokens", 7);
  const Launch l16k = MakeLaunch(64, 8, 1, 0, {{0, 16384}}, 101);
  ExpectMatchesReference(l16k, RunPrefill(l16k, true), "16,384 tokens", 257);
  const Launch late = MakeLaunch(128, 8, 1, 1000, {{3583, 512}, {0, 3}, {1000, 64}}, 102);
  ExpectMatchesReference(late, RunPrefill(late, true), "late chunks");
}

// Every cache row no chunk's span reaches (past each sequence's last position, in its last block
// and the blocks after) holds inf in V and NaN in K, as a reused block might: the kernel zeroes
// those V rows and masks those scores, so the output is still the reference's, finite, and the
// tiled kernel's.
TEST(HopperPrefillAttentionTest, NonFiniteRowsPastTheSpanAddNothing) {
  LLM_REQUIRE_HOPPER();
  for (const int32_t bt : {16, 64, 128}) {
    Launch l = MakeLaunch(128, 4, 2, 0, {{0, 70}, {40, 25}, {0, 1}}, 140 + bt, bt);
    std::vector<bool> used(l.k.size() / l.D, false);  // per cached row (block, head, t)
    for (const PrefillChunk& c : l.chunks) {
      for (int32_t pos = 0; pos < c.pos_begin + c.tokens; ++pos) {
        const int64_t block = l.tables[static_cast<size_t>(c.slot) * l.max_blocks + pos / l.bt];
        for (int32_t h = 0; h < l.KV; ++h) used[(block * l.KV + h) * l.bt + pos % l.bt] = true;
      }
    }
    for (size_t row = 0; row < used.size(); ++row) {
      if (used[row]) continue;
      for (int32_t d = 0; d < l.D; ++d) {
        l.k[row * l.D + d] = 0x7FC0;  // NaN
        l.v[row * l.D + d] = 0x7F80;  // inf
      }
    }
    const std::string what = "poisoned rows, blocks of " + std::to_string(bt);
    const size_t chunk_values = static_cast<size_t>(l.rows - 5) * l.H() * l.D;  // not padding
    for (const bool hopper : {true, false}) {  // the tiled kernel zero-fills those rows too
      const std::vector<float> out = RunPrefill(l, hopper);
      ExpectMatchesReference(l, out, what.c_str());
      for (size_t i = 0; i < chunk_values; ++i) {
        ASSERT_TRUE(std::isfinite(out[i])) << what << (hopper ? ", hopper " : ", tiled ") << i;
      }
    }
  }
}

// A row's output depends on its own keys alone: the same prompt cut into chunks at other
// points gives every row the same bits (batch invariance within the kernel).
TEST(HopperPrefillAttentionTest, ChunkingLeavesTheBitsAlone) {
  LLM_REQUIRE_HOPPER();
  for (const int32_t window : {0, 100}) {
    Launch whole = MakeLaunch(128, 4, 2, window, {{0, 300}}, 120);
    Launch cut = whole;
    cut.chunks = {{0, 77, 0, 0}, {77, 150, 0, 77}, {227, 73, 0, 227}};
    const std::vector<float> a = RunPrefill(whole, true), b = RunPrefill(cut, true);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "window " << window;
  }
}

// The two kernels agree to rounding on the same launch: within a few bf16 steps of the larger
// output (relative), or 2e-2 near zero.
TEST(HopperPrefillAttentionTest, AgreesWithTheTiledKernel) {
  LLM_REQUIRE_HOPPER();
  const Launch l = MakeLaunch(128, 8, 1, 0, {{0, 700}, {100, 300}}, 130);
  const std::vector<float> hopper = RunPrefill(l, true), tiled = RunPrefill(l, false);
  double worst = 0;
  for (size_t i = 0; i < hopper.size(); ++i) {
    const double scale = std::max(1.0, static_cast<double>(std::fabs(tiled[i])));
    worst = std::max(worst, std::fabs(hopper[i] - tiled[i]) / scale);
  }
  EXPECT_LT(worst, 2e-2);
}

}  // namespace
}  // namespace llm::kernels
