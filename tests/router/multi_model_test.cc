// Several models behind one router: each request goes only to workers that report serving the
// model it names (name or alias), over gRPC and HTTP; an unknown model is NOT_FOUND / 404
// model_not_found listing those served; a gRPC request without a model is INVALID_ARGUMENT when
// there are several; /v1/models lists each name once. Scripted fake workers (tools/fake_worker)
// report the names.
#include <grpcpp/grpcpp.h>

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llm/v1/generation.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "router/router_server.h"
#include "tests/router/http_test_util.h"
#include "tests/test_util.h"
#include "tools/fake_worker/fake_worker.h"

namespace llm::router {
namespace {

using tools::FakeBehaviour;
using tools::FakeWorker;

class MultiModelTest : public ::testing::Test {
 protected:
  // Worker 0 and 1 serve "alpha"; worker 2 serves "beta", also called "beta-latest".
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      workers_.push_back(FakeWorker::Start(FakeBehaviour{}));
      llm::v1::LoadReport r = workers_.back()->load();
      r.set_model(i < 2 ? "alpha" : "beta");
      if (i == 2) r.add_served_names("beta-latest");
      workers_.back()->SetLoad(r);
    }
    RouterConfig c;
    c.listen = "127.0.0.1:0";
    c.metrics_listen = "";
    c.http_listen = "127.0.0.1:0";
    for (const auto& w : workers_) c.workers.push_back(w->address());
    c.threads = 2;
    router_ = std::make_unique<RouterServer>(c);
    ASSERT_TRUE(router_->Start().ok());
    ASSERT_TRUE(llm::testing::WaitFor(
        [&] {
          int named = 0;
          for (const auto& v : router_->pool().Snapshot()) {
            named += v.healthy && (v.report.model == "alpha" || v.report.model == "beta") ? 1 : 0;
          }
          return named == 3;
        },
        std::chrono::seconds(10)));
    stub_ = llm::v1::Generation::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(router_->port()), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Generate(const std::string& model) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    llm::v1::GenerateRequest req;
    req.set_text("hello");
    req.set_model(model);
    auto reader = stub_->Generate(&ctx, req);
    llm::v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
    }
    return reader->Finish();
  }
  HttpReply Http(const std::string& raw) {
    const int fd = llm::testing::ConnectLoopback(router_->http_port());
    Send(fd, raw);
    HttpReply r = ReadReply(fd);
    ::close(fd);
    return r;
  }
  int64_t Calls(int w) const { return workers_[w]->generate_calls(); }

  std::vector<std::unique_ptr<FakeWorker>> workers_;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<llm::v1::Generation::Stub> stub_;
};

// 1,000 interleaved requests over gRPC and HTTP, each naming one of the three names: every one
// answered, by a worker of the model it named.
TEST_F(MultiModelTest, EachRequestGoesToAWorkerOfItsModel) {
  std::mt19937 rng(9);
  int64_t alpha = 0, beta = 0;
  for (int i = 0; i < 1000; ++i) {
    const int pick = static_cast<int>(rng() % 3);
    const std::string model = pick == 0 ? "alpha" : pick == 1 ? "beta" : "beta-latest";
    (pick == 0 ? alpha : beta) += 1;
    if (i % 2 == 0) {
      const grpc::Status st = Generate(model);
      ASSERT_TRUE(st.ok()) << i << " " << model << ": " << st.error_message();
    } else {
      const HttpReply r =
          Http(Post("/v1/completions", nlohmann::json{{"model", model}, {"prompt", "x"}}.dump()));
      ASSERT_EQ(r.status, 200) << i << " " << model << ": " << r.body;
      EXPECT_EQ(nlohmann::json::parse(r.body)["model"], model);
    }
  }
  EXPECT_EQ(Calls(0) + Calls(1), alpha);
  EXPECT_EQ(Calls(2), beta);
  EXPECT_GT(Calls(0), 0);
  EXPECT_GT(Calls(1), 0);
}

TEST_F(MultiModelTest, UnknownOrMissingModelsFailNamingThem) {
  grpc::Status st = Generate("gamma");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("'gamma' is not served here"), std::string::npos)
      << st.error_message();
  EXPECT_NE(st.error_message().find("alpha, beta, beta-latest"), std::string::npos)
      << st.error_message();
  st = Generate("");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("several models (alpha, beta)"), std::string::npos)
      << st.error_message();
  const HttpReply r = Http(Post("/v1/completions", R"({"model": "gamma", "prompt": "x"})"));
  EXPECT_EQ(r.status, 404);
  const auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("alpha, beta, beta-latest"),
            std::string::npos);
  EXPECT_EQ(Calls(0) + Calls(1) + Calls(2), 0);
}

TEST_F(MultiModelTest, ModelsAreListedOnceEach) {
  const HttpReply r = Http("GET /v1/models HTTP/1.1\r\nHost: test\r\n\r\n");
  ASSERT_EQ(r.status, 200);
  std::vector<std::string> ids;
  const nlohmann::json list = nlohmann::json::parse(r.body);
  for (const auto& m : list["data"]) ids.push_back(m["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"alpha", "beta", "beta-latest"}));
}

}  // namespace
}  // namespace llm::router
