// GenerateRequest.n on a real worker (tinystories-656k, CPU): the choices stream on one call,
// each message carrying its index; each choice is its own sequence with its own random stream
// (seed + index), the ids of a single request with that seed; the later choices take the
// prompt's full blocks from the prefix cache (the prompt is computed once); every choice ends
// with its finish reason and usage; n past 16 is refused naming n. A list of prompts gives each
// prompt its n choices.
#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/grpc_test_util.h"
#include "tests/test_util.h"

namespace llm::testing {
namespace {

// A prompt of several 16-token blocks, seen by no other test (its blocks are not cached yet).
constexpr char kPrompt[] =
    "Once upon a time, in a small town by the sea, there lived a girl called Mia who kept a "
    "blue shell in her pocket. Every morning she walked to the harbour";

struct Choice {
  std::vector<int32_t> ids;
  int finished = 0;  // messages with a finish reason
  llm::v1::Usage usage;
};

// Every message of one call, by choice index.
std::map<uint32_t, Choice> Collect(llm::v1::Generation::Stub& stub,
                                   const llm::v1::GenerateRequest& request, grpc::Status* status) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub.Generate(&ctx, request);
  std::map<uint32_t, Choice> choices;
  llm::v1::GenerateResponse m;
  while (reader->Read(&m)) {
    Choice& c = choices[m.index()];
    c.ids.insert(c.ids.end(), m.token_ids().begin(), m.token_ids().end());
    if (m.finish_reason() != llm::v1::FINISH_REASON_UNSPECIFIED) ++c.finished;
    if (m.has_usage()) c.usage = m.usage();
  }
  *status = reader->Finish();
  return choices;
}

llm::v1::GenerateRequest Sampled(uint32_t n, uint64_t seed) {
  llm::v1::GenerateRequest r;
  r.set_text(kPrompt);
  r.set_max_tokens(12);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(1.0f);
  r.mutable_sampling()->set_seed(seed);
  r.set_n(n);
  return r;
}

TEST(ChoicesTest, FourChoicesShareThePromptEachWithItsOwnStream) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  auto worker = WorkerProcess::Start("models/tinystories-656k", {"--engine.cpu_threads", "1"});
  ASSERT_GT(worker->port(), 0) << worker->process().Output();
  auto stub = worker->generation();

  grpc::Status status;
  const std::map<uint32_t, Choice> four = Collect(*stub, Sampled(4, 1000), &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(four.size(), 4u);
  const uint32_t prompt = four.at(0).usage.prompt_tokens();
  ASSERT_GE(prompt, 32u);  // two full blocks at least
  for (uint32_t i = 0; i < 4; ++i) {
    const Choice& c = four.at(i);
    EXPECT_EQ(c.ids.size(), 12u) << "choice " << i;
    EXPECT_EQ(c.finished, 1) << "choice " << i;
    EXPECT_EQ(c.usage.prompt_tokens(), prompt) << "choice " << i;
    EXPECT_EQ(c.usage.completion_tokens(), 12u) << "choice " << i;
    if (i == 0) {
      EXPECT_EQ(c.usage.cached_prompt_tokens(), 0u);
    } else {
      // The prompt's full blocks come from the prefix cache: only its last partial block (and
      // the first decode position) is computed again.
      EXPECT_EQ(c.usage.cached_prompt_tokens(), prompt / 16 * 16) << "choice " << i;
    }
  }
  EXPECT_NE(four.at(0).ids, four.at(1).ids);  // their own random streams
  // Choice i is a single request with seed 1000 + i.
  for (uint32_t i = 0; i < 4; ++i) {
    const std::map<uint32_t, Choice> one = Collect(*stub, Sampled(1, 1000 + i), &status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one.at(0).ids, four.at(i).ids) << "choice " << i;
  }

  (void)Collect(*stub, Sampled(17, 1), &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("n:"), std::string::npos) << status.error_message();
}

// A list of prompts (GenerateRequest.more_prompts) with n = 2: prompt p's choices are indexes
// 2p and 2p + 1, each the single request of its prompt with seed + j (a prompt is sampled as it
// would be alone), with its own prompt's usage. A cancel ends every choice; a bad later prompt
// is refused before anything streams, naming it.
TEST(ChoicesTest, ListedPromptsEachGetTheirChoices) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  auto worker = WorkerProcess::Start("models/tinystories-656k", {"--engine.cpu_threads", "1"});
  ASSERT_GT(worker->port(), 0) << worker->process().Output();
  auto stub = worker->generation();
  const std::vector<std::string> prompts = {kPrompt, "The dog ran", "Tom and Sue went to"};
  llm::v1::GenerateRequest batch = Sampled(2, 77);
  batch.add_more_prompts()->set_text(prompts[1]);
  batch.add_more_prompts()->mutable_token_ids()->add_ids(1);  // token ids: "BOS" alone
  grpc::Status status;
  const std::map<uint32_t, Choice> all = Collect(*stub, batch, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(all.size(), 6u);
  for (uint32_t i = 0; i < 6; ++i) {
    llm::v1::GenerateRequest alone = Sampled(1, 77 + i % 2);
    if (i / 2 == 1) alone.set_text(prompts[1]);
    if (i / 2 == 2) alone.mutable_token_ids()->add_ids(1);
    const std::map<uint32_t, Choice> one = Collect(*stub, alone, &status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(all.at(i).ids, one.at(0).ids) << "choice " << i;
    EXPECT_EQ(all.at(i).finished, 1) << "choice " << i;
    EXPECT_EQ(all.at(i).usage.prompt_tokens(), one.at(0).usage.prompt_tokens()) << "choice " << i;
  }
  EXPECT_NE(all.at(0).usage.prompt_tokens(), all.at(2).usage.prompt_tokens());
  // A later prompt out of the vocabulary: refused with nothing streamed, named by its place.
  batch.mutable_more_prompts(1)->mutable_token_ids()->add_ids(1 << 20);
  const std::map<uint32_t, Choice> none = Collect(*stub, batch, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("more_prompts[1].token_ids"), std::string::npos)
      << status.error_message();
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace llm::testing
