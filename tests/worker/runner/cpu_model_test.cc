#include "worker/runner/cpu_model.h"

#include <cstring>
#include <fstream>
#include <numeric>

#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "worker/runner/sequence_generator.h"

namespace llm::runner {
namespace {

using ::testing::HasSubstr;

struct Golden {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
};

Golden LoadGolden() {
  std::ifstream f(llm::testing::SharedPath("golden/tinystories-656k.jsonl"));
  std::string line;
  std::getline(f, line);
  const auto j = nlohmann::json::parse(line);
  return {j["prompt_ids"].get<std::vector<int32_t>>(),
          j["generated_ids"].get<std::vector<int32_t>>()};
}

class CpuModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLM_REQUIRE_SHARED("models/tinystories-656k");
    LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
    auto m = CpuModel::Load(llm::testing::SharedPath("models/tinystories-656k"), &pool_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *std::move(m);
    golden_ = LoadGolden();
  }

  // Logits of the last token after prefilling `ids` in chunks of `chunk` tokens.
  std::vector<float> PrefillLogits(const std::vector<int32_t>& ids, size_t chunk) {
    CpuKvCache kv(model_->config(), 8, 16);
    std::vector<int32_t> table(8);
    std::iota(table.begin(), table.end(), 0);
    std::vector<float> logits;
    for (size_t begin = 0; begin < ids.size(); begin += chunk) {
      const size_t n = std::min(chunk, ids.size() - begin);
      SeqChunk c{0, static_cast<int32_t>(n), static_cast<int32_t>(begin), table, true};
      std::span<const int32_t> tokens(ids.data() + begin, n);
      EXPECT_TRUE(model_->Forward({tokens, std::span<const SeqChunk>(&c, 1)}, kv, logits).ok());
    }
    return logits;
  }

  ThreadPool pool_{2};
  std::unique_ptr<CpuModel> model_;
  Golden golden_;
};

TEST_F(CpuModelTest, ReproducesGoldenIds) {
  SequenceOptions opt;
  opt.max_tokens = static_cast<int32_t>(golden_.generated_ids.size());
  opt.sampling.temperature = 0;
  auto r = GenerateSequence(*model_, golden_.prompt_ids, opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generated_ids, golden_.generated_ids);
  EXPECT_EQ(r->finish, sampling::FinishReason::kLength);
}

TEST_F(CpuModelTest, F32CopyGivesTheSameIds) {
  LLM_REQUIRE_SHARED("models/tinystories-656k-f32");
  auto f32 = CpuModel::Load(llm::testing::SharedPath("models/tinystories-656k-f32"), &pool_);
  ASSERT_TRUE(f32.ok()) << f32.status();
  SequenceOptions opt;
  opt.max_tokens = static_cast<int32_t>(golden_.generated_ids.size());
  opt.sampling.temperature = 0;
  auto r = GenerateSequence(**f32, golden_.prompt_ids, opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generated_ids, golden_.generated_ids);
}

TEST_F(CpuModelTest, ChunkedPrefillIsBitIdentical) {
  std::vector<int32_t> ids = golden_.prompt_ids;
  ids.insert(ids.end(), golden_.generated_ids.begin(), golden_.generated_ids.begin() + 30);
  const auto whole = PrefillLogits(ids, ids.size());
  for (size_t chunk : {1u, 7u, 16u}) {
    const auto chunked = PrefillLogits(ids, chunk);
    ASSERT_EQ(whole.size(), chunked.size());
    EXPECT_EQ(0, std::memcmp(whole.data(), chunked.data(), whole.size() * 4)) << "chunk " << chunk;
  }
}

// Two sequences in one batch (one prefilling, one decoding, sharing the cache in disjoint
// blocks) give exactly the logits each gives alone.
TEST_F(CpuModelTest, BatchedSequencesAreBitIdenticalToAlone) {
  const std::vector<int32_t> a = golden_.prompt_ids;
  std::vector<int32_t> b = golden_.prompt_ids;
  b.insert(b.end(), golden_.generated_ids.begin(), golden_.generated_ids.begin() + 20);
  const auto a_alone = PrefillLogits(a, a.size());
  const auto b_alone = PrefillLogits(b, b.size());

  CpuKvCache kv(model_->config(), 8, 16);
  const std::vector<int32_t> table_a{5, 6}, table_b{0, 1, 2};
  std::vector<float> logits;
  // Step 1: b's first 25 tokens alone.
  SeqChunk b1{0, 25, 0, table_b, false};
  ASSERT_TRUE(
      model_
          ->Forward({std::span<const int32_t>(b.data(), 25), std::span<const SeqChunk>(&b1, 1)}, kv,
                    logits)
          .ok());
  // Step 2: a's whole prompt and b's last token together.
  std::vector<int32_t> tokens = a;
  tokens.push_back(b[25]);
  const SeqChunk chunks[2] = {{0, static_cast<int32_t>(a.size()), 0, table_a, true},
                              {static_cast<int32_t>(a.size()), 1, 25, table_b, true}};
  ASSERT_TRUE(model_->Forward({tokens, chunks}, kv, logits).ok());
  const size_t v = model_->config().vocab_size;
  ASSERT_EQ(logits.size(), 2 * v);
  EXPECT_EQ(0, std::memcmp(logits.data(), a_alone.data(), v * 4));
  EXPECT_EQ(0, std::memcmp(logits.data() + v, b_alone.data(), v * 4));
}

// The thread count changes how attention and the products are split into work items (with
// many threads and one decoding token, one query head per item), never a bit of the logits.
TEST_F(CpuModelTest, ThreadCountDoesNotChangeABit) {
  std::vector<int32_t> ids = golden_.prompt_ids;
  ids.insert(ids.end(), golden_.generated_ids.begin(), golden_.generated_ids.begin() + 20);
  const std::string dir = llm::testing::SharedPath("models/tinystories-656k");
  ThreadPool eight(8);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &eight}) {
    auto other = CpuModel::Load(dir, pool);
    ASSERT_TRUE(other.ok()) << other.status();
    for (size_t chunk : {size_t{1}, ids.size()}) {
      const std::vector<float> want = PrefillLogits(ids, chunk);
      std::swap(model_, *other);
      const std::vector<float> got = PrefillLogits(ids, chunk);
      std::swap(model_, *other);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << (pool == nullptr ? "no pool" : "8 threads") << ", chunks of " << chunk;
    }
  }
}

TEST_F(CpuModelTest, BadBatchesAreErrorsNotCrashes) {
  CpuKvCache kv(model_->config(), 2, 16);
  const std::vector<int32_t> table{0, 1};
  std::vector<float> logits;
  const std::vector<int32_t> oov{5000};
  SeqChunk c{0, 1, 0, table, true};
  auto st = model_->Forward({oov, std::span<const SeqChunk>(&c, 1)}, kv, logits);
  EXPECT_THAT(std::string(st.message()), HasSubstr("5000"));
  const std::vector<int32_t> one{1};
  SeqChunk far{0, 1, 40, table, true};  // needs a third block
  st = model_->Forward({one, std::span<const SeqChunk>(&far, 1)}, kv, logits);
  EXPECT_THAT(std::string(st.message()), HasSubstr("KV blocks"));
  const std::vector<int32_t> bad_table{0, 9};
  SeqChunk outside{0, 1, 20, bad_table, true};
  st = model_->Forward({one, std::span<const SeqChunk>(&outside, 1)}, kv, logits);
  EXPECT_THAT(std::string(st.message()), HasSubstr("outside the cache"));
}

TEST_F(CpuModelTest, GeneratorChecksTheContextAndStopsOnStopIds) {
  SequenceOptions opt;
  opt.max_tokens = 600;
  auto r = GenerateSequence(*model_, golden_.prompt_ids, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("max_tokens"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("512"));

  opt.max_tokens = 50;
  opt.sampling.temperature = 0;
  opt.stop_token_ids = {golden_.generated_ids[3]};
  r = GenerateSequence(*model_, golden_.prompt_ids, opt);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, sampling::FinishReason::kStopToken);
  EXPECT_EQ(r->generated_ids,
            std::vector<int32_t>(golden_.generated_ids.begin(), golden_.generated_ids.begin() + 4));
}

TEST_F(CpuModelTest, SameSeedSameSample) {
  SequenceOptions opt;
  opt.max_tokens = 40;
  opt.sampling.temperature = 1.0f;
  opt.sampling.top_p = 0.9f;
  opt.sampling.seed = 1234;
  auto a = GenerateSequence(*model_, golden_.prompt_ids, opt);
  auto b = GenerateSequence(*model_, golden_.prompt_ids, opt);
  opt.sampling.seed = 4321;
  auto c = GenerateSequence(*model_, golden_.prompt_ids, opt);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->generated_ids, b->generated_ids);
  EXPECT_NE(a->generated_ids, c->generated_ids);
}

}  // namespace
}  // namespace llm::runner
