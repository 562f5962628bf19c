#include "worker/loop/request_spec.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llm::loop {
namespace {

using ::testing::HasSubstr;

RequestLimits Limits() {
  RequestLimits l;
  l.vocab_size = 100;
  l.max_context = 64;
  l.kv_capacity_tokens = 1024;
  l.eos_token_ids = {2};
  return l;
}

GenerateSpec Text(std::string text) {
  GenerateSpec s;
  s.text = std::move(text);
  return s;
}

std::string Error(const GenerateSpec& s) {
  return std::string(ValidateSpec(s, Limits()).message());
}

TEST(RequestSpecTest, EveryFieldIsCheckedByName) {
  EXPECT_TRUE(ValidateSpec(Text("hi"), Limits()).ok());
  EXPECT_THAT(Error(Text("")), HasSubstr("text: the prompt is empty"));
  EXPECT_THAT(Error(Text("bad \xFF utf8")), HasSubstr("text: not valid UTF-8"));
  GenerateSpec ids;
  ids.has_text = false;
  EXPECT_THAT(Error(ids), HasSubstr("token_ids: the prompt is empty"));
  ids.token_ids = {1, 2, 100};
  EXPECT_THAT(Error(ids), HasSubstr("token_ids.ids[2]: 100 is outside the vocabulary"));
  GenerateSpec s = Text("x");
  s.max_tokens = 64;
  EXPECT_THAT(Error(s), HasSubstr("max_tokens"));
  s = Text("x");
  s.sampling.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(Error(s), HasSubstr("sampling.temperature"));
  s = Text("x");
  s.sampling.temperature = -0.5f;
  EXPECT_THAT(Error(s), HasSubstr("sampling.temperature"));
  s = Text("x");
  s.sampling.top_p = 0.0f;
  EXPECT_THAT(Error(s), HasSubstr("sampling.top_p"));
  s = Text("x");
  s.stop.assign(17, "a");
  EXPECT_THAT(Error(s), HasSubstr("stop: 17 strings; at most 16"));
  s = Text("x");
  s.stop = {"ok", std::string(300, 'a')};
  EXPECT_THAT(Error(s), HasSubstr("stop[1]: longer than 256 bytes"));
  s = Text("x");
  s.stop = {""};
  EXPECT_THAT(Error(s), HasSubstr("stop[0]: empty"));
  s = Text("x");
  s.stop_token_ids = {5, -1};
  EXPECT_THAT(Error(s), HasSubstr("stop_token_ids[1]"));
  s = Text("x");
  s.logprobs = 21;
  EXPECT_THAT(Error(s), HasSubstr("logprobs"));
  s = Text("x");
  s.request_id = std::string(200, 'r');
  EXPECT_THAT(Error(s), HasSubstr("request_id"));
  s = Text(std::string((1 << 20) + 1, 'a'));
  EXPECT_THAT(Error(s), HasSubstr("text: 1048577 bytes"));
}

// The wire's uint32 values reach the checks whole: an error quotes the number the client sent,
// not a clamped or float-formatted one.
TEST(RequestSpecTest, OutOfRangeNumbersAreQuotedAsSent) {
  constexpr int64_t kMaxUint32 = 4294967295;
  GenerateSpec s = Text("x");
  s.max_tokens = kMaxUint32;
  EXPECT_THAT(Error(s), HasSubstr("max_tokens: 4294967295 leaves no room"));
  s = Text("x");
  s.sampling.top_k = kMaxUint32;
  EXPECT_THAT(Error(s), HasSubstr("sampling.top_k: 4294967295 is outside [0, 100]"));
  s = Text("x");
  s.logprobs = kMaxUint32;
  EXPECT_THAT(Error(s), HasSubstr("logprobs: 4294967295 is outside [0, 20]"));
}

// A constrained output ends by a stop token once it is complete; with no EOS id in the model
// and none named, every id of that step would be masked, so the request is refused.
TEST(RequestSpecTest, AConstraintNeedsAStopToken) {
  GenerateSpec s = Text("x");
  s.constraint.kind = constraint::Kind::kJsonObject;
  EXPECT_TRUE(ValidateSpec(s, Limits()).ok());
  RequestLimits no_eos = Limits();
  no_eos.eos_token_ids.clear();
  const absl::Status st = ValidateSpec(s, no_eos);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("stop_token_ids: a constrained output"));
  s.stop_token_ids = {7};
  EXPECT_TRUE(ValidateSpec(s, no_eos).ok());
  s.constraint = {};
  s.stop_token_ids.clear();
  EXPECT_TRUE(ValidateSpec(s, no_eos).ok());
}

TEST(RequestSpecTest, BuildChecksTheContextAndAddsEos) {
  GenerateSpec s = Text("x");
  s.max_tokens = 10;
  auto r = BuildEngineRequest(s, std::vector<int32_t>(60, 1), Limits());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(
      std::string(r.status().message()),
      HasSubstr("max_tokens: prompt (60 tokens) + max_tokens (10) exceeds the context of 64"));
  r = BuildEngineRequest(Text("x"), std::vector<int32_t>(64, 1), Limits());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("text: the prompt is 64 tokens"));
  // max_tokens 0: the rest of the context, up to the default.
  r = BuildEngineRequest(Text("x"), std::vector<int32_t>(60, 1), Limits());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->max_tokens, 4);
  EXPECT_EQ(r->stop_token_ids, std::vector<int32_t>{2});
  s = Text("x");
  s.ignore_eos = true;
  s.stop_token_ids = {7};
  r = BuildEngineRequest(s, {1, 2}, Limits());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_token_ids, std::vector<int32_t>{7});
  RequestLimits small = Limits();
  small.kv_capacity_tokens = 32;
  s = Text("x");
  s.max_tokens = 40;
  r = BuildEngineRequest(s, {1, 2}, small);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("KV cache"));
  // A KV pool smaller than the context: max_tokens 0 means the rest of the pool (it was the
  // rest of the context, then refused as a max_tokens the client never sent), and a prompt
  // that fills the pool is refused naming the prompt.
  EXPECT_EQ(small.accepted_context(), 32);
  EXPECT_EQ(Limits().accepted_context(), 64);
  r = BuildEngineRequest(Text("x"), std::vector<int32_t>(6, 1), small);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_tokens, 26);
  r = BuildEngineRequest(Text("x"), std::vector<int32_t>(32, 1), small);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("text: the prompt is 32 tokens; the KV cache holds 32"));
}

// max_tokens_fit (Anthropic's max_tokens): an upper bound lowered to what the context, the KV
// pool and the limit leave, never a refusal; a prompt that fills the context still is one.
TEST(RequestSpecTest, AFittingMaxTokensIsLoweredNotRefused) {
  GenerateSpec s = Text("x");
  s.max_tokens = 32000;  // Claude Code's
  s.max_tokens_fit = true;
  EXPECT_TRUE(ValidateSpec(s, Limits()).ok()) << Error(s);
  auto r = BuildEngineRequest(s, std::vector<int32_t>(60, 1), Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_tokens, 4);
  s.max_tokens = 3;  // under what the context leaves: as asked
  r = BuildEngineRequest(s, std::vector<int32_t>(60, 1), Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_tokens, 3);
  RequestLimits limited = Limits();
  limited.kv_capacity_tokens = 32;
  limited.max_tokens_cap = 8;
  s.max_tokens = 32000;
  EXPECT_TRUE(ValidateSpec(s, limited).ok());
  r = BuildEngineRequest(s, std::vector<int32_t>(6, 1), limited);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_tokens, 8);
  r = BuildEngineRequest(s, std::vector<int32_t>(28, 1), limited);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_tokens, 4);
  r = BuildEngineRequest(s, std::vector<int32_t>(64, 1), Limits());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("text: the prompt is 64 tokens"));
}

}  // namespace
}  // namespace llm::loop
