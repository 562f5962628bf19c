// logit_bias through a whole CPU worker (random:tiny): a -100 bias moves greedy decoding off a
// token, a +100 bias all but forces one, an id outside the vocabulary fails the request alone
// naming the field.
#include <algorithm>

#include "gtest/gtest.h"
#include "tests/worker/loop/collecting_sink.h"
#include "tests/worker/loop/worker_test_util.h"

namespace llm::loop {
namespace {

StreamUpdate RunToEnd(Worker& w, GenerateSpec spec) {
  auto sink = std::make_shared<CollectingSink>();
  const auto key = w.Submit(std::move(spec), sink);
  EXPECT_TRUE(key.ok()) << key.status();
  EXPECT_TRUE(sink->Wait());
  EXPECT_TRUE(sink->error().ok()) << sink->error();
  return sink->result();
}

GenerateSpec Greedy(int32_t max_tokens) {
  GenerateSpec s;
  s.text = "Once upon a time";
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = 0;
  return s;
}

TEST(LogitBiasWorkerTest, BansAndForcesTokens) {
  auto w = MakeByteLevelWorker(2);
  ASSERT_TRUE(w.ok()) << w.status();
  Worker& worker = *w->worker;
  const std::vector<int32_t> plain = RunToEnd(worker, Greedy(8)).token_ids;
  ASSERT_EQ(plain.size(), 8u);
  // Banning the tokens greedy decoding chose: none of them comes back.
  GenerateSpec banned = Greedy(8);
  for (int32_t t : plain) banned.sampling.logit_bias.emplace_back(t, -100.0f);
  std::sort(banned.sampling.logit_bias.begin(), banned.sampling.logit_bias.end());
  banned.sampling.logit_bias.erase(
      std::unique(banned.sampling.logit_bias.begin(), banned.sampling.logit_bias.end()),
      banned.sampling.logit_bias.end());
  for (int32_t t : RunToEnd(worker, banned).token_ids) {
    EXPECT_EQ(std::count(plain.begin(), plain.end(), t), 0) << "token " << t;
  }
  // Forcing one: every token is it.
  GenerateSpec forced = Greedy(6);
  forced.sampling.logit_bias = {{65, 100.0f}};
  EXPECT_EQ(RunToEnd(worker, forced).token_ids, std::vector<int32_t>(6, 65));
  // An id past the vocabulary fails alone, naming the field.
  GenerateSpec bad = Greedy(4);
  bad.sampling.logit_bias = {{1 << 30, 1.0f}};
  const auto refused = worker.Submit(bad, std::make_shared<CollectingSink>());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("sampling.logit_bias"), std::string::npos)
      << refused.status();
  EXPECT_EQ(RunToEnd(worker, Greedy(8)).token_ids, plain);
}

}  // namespace
}  // namespace llm::loop
