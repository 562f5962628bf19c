// The CUDA runner's buffer plan is host arithmetic: checked without a device.
#include "worker/runner/cuda/step_buffers.h"

#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "worker/model/shapes.h"
#include "worker/runner/cuda/step_layout.h"

namespace llm::runner::cuda {
namespace {

TEST(StepSizesTest, RowsBlocksAndPartitionsCoverTheLargestStep) {
  auto config = model::ShapeConfig("llama-3-8b");
  ASSERT_TRUE(config.ok());
  const engine::EngineSizes engine{.max_slots = 256, .kv_blocks = 0, .block_tokens = 16};
  const StepSizes z = PlanStepSizes(*config, engine, 8192, 2048, /*sm_count=*/132, false);
  EXPECT_EQ(z.max_blocks_per_seq, 8192 / 16);
  // Every prompt token and every slot's decode token fits, padded to the prefill alignment.
  EXPECT_GE(z.max_rows, 2048 + 256);
  EXPECT_EQ(z.max_rows % kPrefillRowAlign, 0);
  EXPECT_LT(z.max_rows, 2048 + 256 + kPrefillRowAlign);
  // At most one sampling row per slot's decode and one per prompt completing.
  EXPECT_EQ(z.max_sample_rows, 512);
  // Split-K: at most 64 chunks; the workspace holds every decode batch size's (row, chunk)
  // pairs: batch 1 is cut into 64 (528 blocks wanted over 8 kv heads), 256 rows are not cut.
  EXPECT_EQ(z.max_splits, 64);
  EXPECT_EQ(kernels::DecodeSplits(1, 8, 132, z.max_splits), 64);
  EXPECT_EQ(kernels::DecodeSplits(64, 8, 132, z.max_splits), 2);
  EXPECT_EQ(kernels::DecodeSplits(256, 8, 132, z.max_splits), 1);
  for (int32_t rows = 1; rows <= 256; ++rows) {
    EXPECT_EQ(DecodeSplitsFor(z, rows), kernels::DecodeSplits(rows, 8, 132, z.max_splits));
    EXPECT_LE(int64_t{rows} * DecodeSplitsFor(z, rows), z.split_parts);
  }
  // Batch-invariant: the same chunks at every batch size, and room for all of them.
  const StepSizes inv = PlanStepSizes(*config, engine, 8192, 2048, 132, /*batch_invariant=*/true);
  for (const int32_t rows : {1, 7, 64, 256})
    EXPECT_EQ(DecodeSplitsFor(inv, rows), kInvariantSplits);
  EXPECT_EQ(inv.split_parts, int64_t{256} * kInvariantSplits);
  EXPECT_EQ(z.qkv_dim, config->q_dim() + 2 * config->kv_dim());
  EXPECT_GT(z.upload_bytes, size_t{256} * z.max_blocks_per_seq * 4);
}

TEST(StepSizesTest, SmallStepsAreNotPaddedBeyondTheirAlignment) {
  auto config = model::ShapeConfig("tiny");
  ASSERT_TRUE(config.ok());
  const engine::EngineSizes engine{.max_slots = 2, .kv_blocks = 8, .block_tokens = 16};
  const StepSizes z = PlanStepSizes(*config, engine, 100, 64, /*sm_count=*/132, false);
  EXPECT_EQ(z.max_blocks_per_seq, 7);  // 100 positions in blocks of 16
  EXPECT_EQ(z.max_rows, 128);          // 64 + 2, aligned to 64
  EXPECT_EQ(z.max_sample_rows, 16);    // min(2 * 2, 2 + 64) = 4, aligned to 16
  EXPECT_EQ(z.max_splits, 2);          // 100 positions: 2 chunks of 64 keys
}

// Speculative decoding widens the decode region (each slot a verify group), up to
// kMaxSpeculativeRows, and every row a step can hold is a sampling row.
TEST(StepSizesTest, VerifyGroupsWidenTheDecodeRowsUpToTheCap) {
  auto config = model::ShapeConfig("llama-3-8b");
  ASSERT_TRUE(config.ok());
  const engine::EngineSizes small{.max_slots = 16, .kv_blocks = 0, .block_tokens = 16};
  const StepSizes z = PlanStepSizes(*config, small, 8192, 2048, 132, false, false, 5);
  EXPECT_EQ(z.spec_group, 5);
  EXPECT_EQ(z.max_decode_rows, 16 * 5);
  EXPECT_EQ(z.max_rows, 2048 + 128);  // 2048 + 80, aligned
  EXPECT_EQ(z.max_sample_rows, 80 + 16);
  for (int32_t rows = 1; rows <= z.max_decode_rows; ++rows) {
    EXPECT_LE(int64_t{rows} * DecodeSplitsFor(z, rows), z.split_parts);
  }
  const engine::EngineSizes large{.max_slots = 256, .kv_blocks = 0, .block_tokens = 16};
  const StepSizes capped = PlanStepSizes(*config, large, 8192, 2048, 132, false, false, 5);
  EXPECT_EQ(capped.max_decode_rows, kMaxSpeculativeRows);
  const StepSizes off = PlanStepSizes(*config, large, 8192, 2048, 132, false);
  EXPECT_EQ(off.spec_group, 1);
  EXPECT_EQ(off.max_decode_rows, 256);
}

// A draft model's buffers (a forward pass alone) leave out what only the target's slot table
// and sampler need: at 256 slots of llama-3's 128k vocabulary and an 8k context, the output
// counts and prompt mask, the history, and the sampler's probabilities, over 400 MB.
TEST(StepSizesTest, AForwardPassAloneLeavesOutTheSlotTablesAndSamplersArrays) {
  auto config = model::ShapeConfig("llama-3.2-1b");
  ASSERT_TRUE(config.ok());
  const engine::EngineSizes sizes{.max_slots = 256, .kv_blocks = 0, .block_tokens = 16};
  StepSizes z = PlanStepSizes(*config, sizes, 8192, 2048, 132, false, false, 2);
  const size_t whole = StepBufferBytes(*config, z);
  z.forward_only = true;
  const size_t forward = StepBufferBytes(*config, z);
  const size_t S = 256, V = static_cast<size_t>(config->vocab_size);
  const size_t left_out = S * V * 3 + S * 8192 * 4 + static_cast<size_t>(z.max_sample_rows) * V * 4;
  EXPECT_GE(whole - forward, left_out);
  EXPECT_GT(whole - forward, size_t{400} << 20);
}

// One position's K and V over all layers: what the runner splits the KV memory by when a draft
// model shares it.
TEST(StepSizesTest, KvBytesPerPositionCountsKAndVOfEveryLayer) {
  auto config = model::ShapeConfig("llama-3-8b");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(KvBytesPerPosition(*config, false), 2 * 32 * 8 * 128 * 2);
  EXPECT_EQ(KvBytesPerPosition(*config, true), 2 * 32 * 8 * 128);
}

}  // namespace
}  // namespace llm::runner::cuda
