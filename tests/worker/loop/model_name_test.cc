// A worker answers for its model's name and aliases only: a request naming another model is
// NOT_FOUND naming it (a router sends it only to workers reporting the name).
#include "gtest/gtest.h"
#include "tests/worker/loop/collecting_sink.h"
#include "tests/worker/loop/worker_test_util.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"

namespace llm::loop {
namespace {

TEST(ModelNameTest, ARequestForAnotherModelIsNotFound) {
  auto b = backend::CreateBackend(RandomTinyOnCpu(2));
  ASSERT_TRUE(b.ok()) << b.status();
  WorkerOptions wo;
  wo.model_name = "tiny";
  wo.served_names = {"tiny-latest"};
  auto w =
      Worker::Create(wo, std::move(b->runner), std::move(b->tokenizer), b->config.eos_token_ids);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const char* name : {"", "tiny", "tiny-latest"}) {
    GenerateSpec s;
    s.text = "a";
    s.max_tokens = 2;
    s.model = name;
    auto sink = std::make_shared<CollectingSink>();
    ASSERT_TRUE((*w)->Submit(s, sink).ok()) << name;
    EXPECT_TRUE(sink->Wait());
  }
  GenerateSpec other;
  other.text = "a";
  other.max_tokens = 2;
  other.model = "llama";
  const auto refused = (*w)->Submit(other, std::make_shared<CollectingSink>());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(refused.status().message().find("'llama' is not served here (tiny)"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace llm::loop
