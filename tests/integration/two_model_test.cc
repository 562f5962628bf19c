// A router in front of two real CPU workers of different models: tinystories-656k named "tiny",
// and random:tiny named "rand" with the alias "rand-latest" (a byte-level tokenizer, so the same
// prompt has another token count there). 1,000 interleaved gRPC calls (100 at a time), each naming
// one of the three names, are each answered by a worker of the model they name: the prompt token
// count of every answer is that model's, and each worker's finished-request counter and the
// router's per-model counter add up to the calls that named its model; Tokenize calls go by
// model too. The OpenAI SDK's side of the
// same cluster: openai_two_models_test.py.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/grpc_test_util.h"
#include "tests/test_util.h"

namespace llm::testing {
namespace {

constexpr char kPrompt[] = "Once upon a time there was a";

llm::v1::GenerateRequest Named(const std::string& model) {
  llm::v1::GenerateRequest r = GreedyRequest(kPrompt, 2);
  r.set_model(model);
  return r;
}

// Requests a worker has finished, over every reason.
double Finished(const ServerProcess& w) {
  const std::string page = HttpGet(w.metrics_port(), "/metrics");
  double sum = 0;
  for (const char* reason : {"stop", "length", "error"}) {
    const double v =
        MetricValue(page, std::string("llm_requests_finished_total{reason=\"") + reason + "\"}");
    if (v > 0) sum += v;
  }
  return sum;
}

TEST(TwoModelTest, EachOfAThousandInterleavedCallsIsAnsweredByTheModelItNames) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  auto tiny = WorkerProcess::Start("models/tinystories-656k",
                                   {"--model.name", "tiny", "--engine.cpu_threads", "1"});
  auto rand = WorkerProcess::Start(
      "", {"--model.path", "random:tiny", "--model.name", "rand", "--model.served_names",
           "rand-latest", "--engine.cpu_threads", "1"});
  ASSERT_GT(tiny->port(), 0);
  ASSERT_GT(rand->port(), 0);
  auto router = RouterProcess::Start(tiny->target() + "," + rand->target());
  ASSERT_GT(router->port(), 0);
  ASSERT_TRUE(router->WaitReady(2));
  auto stub = router->generation();

  // Each model's prompt token count, from the worker itself.
  std::map<std::string, uint32_t> prompt_tokens;
  for (const auto* w : {tiny.get(), rand.get()}) {
    const GenerateResult r = Generate(*w->generation(), GreedyRequest(kPrompt, 1));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    prompt_tokens[w == tiny.get() ? "tiny" : "rand"] = r.last.usage().prompt_tokens();
  }
  ASSERT_NE(prompt_tokens["tiny"], prompt_tokens["rand"]);

  const std::vector<std::string> names = {"tiny", "rand", "tiny", "rand-latest"};
  std::vector<llm::v1::GenerateRequest> requests;
  for (int i = 0; i < 1000; ++i) requests.push_back(Named(names[i % names.size()]));
  // In rounds of 100 at once (1,000 at once would be past the workers' queue limits).
  std::vector<TimedResult> results;
  for (size_t begin = 0; begin < requests.size(); begin += 100) {
    const std::vector<llm::v1::GenerateRequest> round(requests.begin() + begin,
                                                      requests.begin() + begin + 100);
    for (TimedResult& r : GenerateConcurrently({stub.get()}, round)) results.push_back(r);
  }
  ASSERT_EQ(results.size(), requests.size());
  int per_model[2] = {0, 0};  // tiny, rand
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.error_message();
    const bool is_tiny = requests[i].model() == "tiny";
    EXPECT_EQ(results[i].last.usage().prompt_tokens(), prompt_tokens[is_tiny ? "tiny" : "rand"])
        << "call " << i << " named " << requests[i].model();
    ++per_model[is_tiny ? 0 : 1];
  }
  EXPECT_EQ(per_model[0], 500);
  // The counters settle just after the last messages; the direct calls above count too.
  auto router_ok = [&](const std::string& model) {
    return MetricValue(HttpGet(router->metrics_port(), "/metrics"),
                       R"(llm_router_requests_total{code="OK",model_name=")" + model + "\"}");
  };
  EXPECT_TRUE(WaitFor(
      [&] {
        return Finished(*tiny) == per_model[0] + 1 && Finished(*rand) == per_model[1] + 1 &&
               router_ok("tiny") == 500 && router_ok("rand") == 500;
      },
      std::chrono::seconds(10)))
      << "finished: tiny " << Finished(*tiny) << ", rand " << Finished(*rand)
      << "; router OK: tiny " << router_ok("tiny") << ", rand " << router_ok("rand");

  // Tokenize goes to a worker of the model it names too: that model's token count.
  for (const auto& [name, count] : {std::pair<std::string, uint32_t>{"tiny", prompt_tokens["tiny"]},
                                    {"rand-latest", prompt_tokens["rand"]}}) {
    grpc::ClientContext ctx;
    llm::v1::TokenizeRequest t;
    t.set_text(kPrompt);
    t.set_model(name);
    llm::v1::TokenizeResponse reply;
    const grpc::Status st = stub->Tokenize(&ctx, t, &reply);
    ASSERT_TRUE(st.ok()) << name << ": " << st.error_message();
    EXPECT_EQ(static_cast<uint32_t>(reply.token_ids_size()), count) << name;
  }

  // A name nobody serves is NOT_FOUND naming those served; no name, with two models, is refused.
  const GenerateResult unknown = Generate(*stub, Named("gpt-4o"));
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(unknown.status.error_message().find("gpt-4o"), std::string::npos);
  EXPECT_NE(unknown.status.error_message().find("rand-latest"), std::string::npos);
  const GenerateResult unnamed = Generate(*stub, GreedyRequest(kPrompt, 2));
  EXPECT_EQ(unnamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace llm::testing
