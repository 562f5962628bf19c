// What a step uploads, without a GPU: each StepLayout array staged 16-byte aligned and byte for
// byte, the speculative allowances and limits where the graph reads them, and the forward
// pass's and slot update's pointers at the same offsets of the device's area.
#include "worker/runner/cuda/step_upload.h"

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llm::runner::cuda {
namespace {

using ::testing::HasSubstr;

// A mixed step: one admission with two blocks, one prompt chunk of three rows, two row changes.
StepLayout MixedLayout() {
  StepLayout l;
  kernels::SlotAdmit admit{};
  admit.slot = 3;
  admit.num_blocks = 2;
  l.admits = {admit};
  l.settings.resize(1);
  l.blocks = {7, 8};
  l.row_changes = {0, 3, 1, -1};
  l.prefill_slot = {3, 3, 3};
  l.prefill_pos = {0, 1, 2};
  l.prefill_token = {11, 12, 13};
  l.prefill_chunks = {kernels::PrefillChunk{0, 3, 3, 0}};
  l.sample_rows = {2, -1};
  l.history_tokens = {5, 6, 7};
  l.rows = 5;
  l.prefill_rows = 3;
  l.decode_rows = 2;
  l.num_sample_rows = 2;
  return l;
}

template <typename T>
bool StagedAt(const std::vector<std::byte>& buffer, int64_t off, const std::vector<T>& v) {
  if (off < 0 || off % 16 != 0) return false;
  if (v.empty()) return true;
  return static_cast<size_t>(off) + v.size() * sizeof(T) <= buffer.size() &&
         std::memcmp(buffer.data() + off, v.data(), v.size() * sizeof(T)) == 0;
}

TEST(StepUploadTest, ArraysAreStagedAlignedAndPointedAt) {
  const StepLayout l = MixedLayout();
  std::vector<std::byte> buffer(4096);
  Staging staging(buffer.data(), buffer.size());
  auto o = StageUpload(l, staging);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(StagedAt(buffer, o->admits, l.admits));
  EXPECT_TRUE(StagedAt(buffer, o->blocks, l.blocks));
  EXPECT_TRUE(StagedAt(buffer, o->rows, l.row_changes));
  EXPECT_TRUE(StagedAt(buffer, o->pslot, l.prefill_slot));
  EXPECT_TRUE(StagedAt(buffer, o->ppos, l.prefill_pos));
  EXPECT_TRUE(StagedAt(buffer, o->ptoken, l.prefill_token));
  EXPECT_TRUE(StagedAt(buffer, o->chunks, l.prefill_chunks));
  EXPECT_TRUE(StagedAt(buffer, o->samples, l.sample_rows));
  EXPECT_TRUE(StagedAt(buffer, o->history, l.history_tokens));
  EXPECT_LT(o->ptoken, o->history);
  EXPECT_LE(static_cast<size_t>(o->history) + 3 * sizeof(int32_t), staging.used());

  // The device's area has the host buffer's layout: pointers are its base plus the offsets.
  std::vector<std::byte> device(4096);
  const std::byte* base = device.data();
  const ForwardShape shape = ShapeOf(l, *o, base);
  EXPECT_EQ(shape.rows, 5);
  EXPECT_EQ(shape.prefill_rows, 3);
  EXPECT_EQ(shape.decode_rows, 2);
  EXPECT_EQ(shape.sample_rows, 2);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(shape.prefill_token), base + o->ptoken);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(shape.prefill_chunks), base + o->chunks);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(shape.sample_rows_index), base + o->samples);
  const kernels::SlotUpdateParams up = SlotUpdatesOf(l, *o, base);
  EXPECT_EQ(up.num_admits, 1);
  EXPECT_EQ(up.num_grants, 0);
  EXPECT_EQ(up.num_row_changes, 2);  // pairs
  EXPECT_EQ(reinterpret_cast<const std::byte*>(up.blocks), base + o->blocks);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(up.row_changes), base + o->rows);
}

TEST(StepUploadTest, SpeculativeAllowancesAndLimitsComeFirst) {
  StepLayout l = MixedLayout();
  l.group = 3;
  l.decode_draft = {2, 0, 1, 0, 0};  // a bucket of 5 decoding slots: 20 bytes, limits at 32
  l.decode_limit = {64, 0, 32, 0, 0};
  std::vector<std::byte> buffer(4096);
  Staging staging(buffer.data(), buffer.size());
  auto o = StageUpload(l, staging);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->draft, 0);
  EXPECT_EQ(o->limit, 32);
  EXPECT_EQ(SpecLimitOffset(5), 32u);
  EXPECT_EQ(SpecLimitOffset(8), 32u);
  EXPECT_TRUE(StagedAt(buffer, o->limit, l.decode_limit));
  const ForwardShape shape = ShapeOf(l, *o, buffer.data());
  EXPECT_EQ(shape.group, 3);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(shape.decode_limit), buffer.data() + 32);
}

TEST(StepUploadTest, AnUploadPastItsStagingIsAnError) {
  const StepLayout l = MixedLayout();
  std::vector<std::byte> buffer(64);
  Staging staging(buffer.data(), buffer.size());
  auto o = StageUpload(l, staging);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(o.status().message(), HasSubstr("overflows its staging"));
}

}  // namespace
}  // namespace llm::runner::cuda
