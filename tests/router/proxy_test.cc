// The router in process against scripted fake workers: relaying, retries only before the first
// message and only for worker failures, ejection, mid-stream failures, deadlines and cancels
// reaching the worker, fast failure with no worker, overload.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"
#include "llm/v1/generation.grpc.pb.h"
#include "router/router_server.h"
#include "tests/router/tcp_forwarder.h"
#include "tests/test_util.h"
#include "tools/fake_worker/fake_worker.h"

namespace llm::router {
namespace {

using tools::FakeBehaviour;
using tools::FakeWorker;

struct Result {
  grpc::Status status;
  std::map<std::string, std::string> trailers;
  int messages = 0;
  bool finished_reason = false;
  double seconds = 0;
};

Result Call(llm::v1::Generation::Stub& stub, int deadline_ms = 10000) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  llm::v1::GenerateRequest req;
  req.set_text("hello");
  const auto start = std::chrono::steady_clock::now();
  auto reader = stub.Generate(&ctx, req);
  llm::v1::GenerateResponse resp;
  Result r;
  while (reader->Read(&resp)) {
    ++r.messages;
    if (resp.finish_reason() != llm::v1::FINISH_REASON_UNSPECIFIED) r.finished_reason = true;
  }
  r.status = reader->Finish();
  for (const auto& [k, v] : ctx.GetServerTrailingMetadata()) {
    r.trailers[std::string(k.data(), k.size())] = std::string(v.data(), v.size());
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// A worker that answers every call UNAVAILABLE "draining" before any message.
FakeBehaviour Draining() {
  FakeBehaviour b;
  b.messages = 0;
  b.fail_code = grpc::StatusCode::UNAVAILABLE;
  b.fail_message = "draining";
  return b;
}

class ProxyTest : public ::testing::Test {
 protected:
  // A static list, or (with `resolve`) discovery.dns "workers.test:1" re-resolved every 50 ms;
  // with `static_names`, the static list's host names are what `resolve` resolves.
  void StartRouter(const std::vector<std::string>& workers, int max_attempts = 3,
                   DnsDiscovery::Resolve resolve = nullptr, bool static_names = false) {
    RouterConfig c;
    c.listen = "127.0.0.1:0";
    c.metrics_listen = "";
    c.dns_refresh = std::chrono::milliseconds(50);
    if (resolve && !static_names) {
      c.dns = "workers.test:1";
    } else {
      c.workers = workers;
    }
    c.proxy.max_attempts = max_attempts;
    c.threads = 2;
    c.pool.eject_after_failures = 3;
    c.pool.eject_base = std::chrono::milliseconds(60000);
    if (configure_) configure_(&c);
    router_ = resolve ? std::make_unique<RouterServer>(c, std::move(resolve))
                      : std::make_unique<RouterServer>(c);
    ASSERT_TRUE(router_->Start().ok());
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(router_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = llm::v1::Generation::NewStub(channel_);
  }
  // Waits until `n` workers are healthy in the router's view.
  void WaitHealthy(size_t n) {
    ASSERT_TRUE(llm::testing::WaitFor(
        [&] {
          size_t healthy = 0;
          for (const auto& v : router_->pool().Snapshot()) healthy += v.healthy ? 1 : 0;
          return healthy >= n;
        },
        std::chrono::milliseconds(5000)))
        << "workers did not become healthy";
  }
  // Waits until the pool holds exactly `ids` (in any order).
  void WaitPool(std::vector<std::string> ids) {
    std::sort(ids.begin(), ids.end());
    std::vector<std::string> now;
    ASSERT_TRUE(llm::testing::WaitFor(
        [&] {
          now.clear();
          for (const auto& v : router_->pool().Snapshot()) now.push_back(v.id);
          std::sort(now.begin(), now.end());
          return now == ids;
        },
        std::chrono::milliseconds(5000)))
        << "the pool never matched the resolver; it holds " << now.size() << " workers";
  }
  // A counter or gauge of the router's /metrics text (-1: absent).
  double Metric(const std::string& name) {
    return llm::testing::MetricValue(router_->metrics().Render(), name);
  }
  WorkerView View(const FakeWorker& w) {
    for (const auto& v : router_->pool().Snapshot()) {
      if (v.id == w.address()) return v;
    }
    return {};
  }

  std::function<void(RouterConfig*)> configure_;  // applied by StartRouter when set
  std::unique_ptr<RouterServer> router_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<llm::v1::Generation::Stub> stub_;
};

TEST_F(ProxyTest, RelaysEveryMessage) {
  FakeBehaviour b;
  b.messages = 50;
  auto w = FakeWorker::Start(b);
  ASSERT_NE(w, nullptr);
  StartRouter({w->address()});
  WaitHealthy(1);
  for (int i = 0; i < 5; ++i) {
    const Result r = Call(*stub_);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.messages, 50);
    EXPECT_TRUE(r.finished_reason);
  }
  EXPECT_EQ(View(*w).in_flight, 0);
  // Counted under the model.name the worker reports (model_name), not the client's text.
  ASSERT_TRUE(llm::testing::WaitFor(
      [&] {
        return Metric("llm_router_requests_total{code=\"OK\",model_name=\"fake-model\"}") == 5;
      },
      std::chrono::seconds(5)));
  EXPECT_GE(Metric("llm_router_time_to_first_message_seconds_count{model_name=\"fake-model\"}"), 5);
}

TEST_F(ProxyTest, RetriesOnAnotherWorkerOnlyBeforeTheFirstMessageAndEjects) {
  const FakeBehaviour failing = Draining();
  auto bad = FakeWorker::Start(failing);
  auto good = FakeWorker::Start(FakeBehaviour{});
  StartRouter({bad->address(), good->address()});
  WaitHealthy(2);
  for (int i = 0; i < 30; ++i) {
    const Result r = Call(*stub_);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.messages, 8);
  }
  // The failing worker was tried, failed three times in a row, and was ejected: no more tries.
  EXPECT_EQ(bad->generate_calls(), 3);
  EXPECT_TRUE(View(*bad).ejected);
  EXPECT_FALSE(View(*good).ejected);
  EXPECT_EQ(good->generate_calls(), 30);
  EXPECT_EQ(Metric("llm_router_retries_total"), 3);  // each failure moved to the good worker
}

// A worker failure with nowhere else to go is not a retry (it was counted as one); and the sole
// worker, ejected after three failures, serves again as soon as it can (ejection never leaves
// no worker at all).
TEST_F(ProxyTest, ASoleFailingWorkerIsNotRetriedElsewhereNorLockedOut) {
  const FakeBehaviour failing = Draining();
  auto w = FakeWorker::Start(failing);
  StartRouter({w->address()});
  WaitHealthy(1);
  for (int i = 0; i < 3; ++i) {
    const Result r = Call(*stub_);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(r.status.error_message().find("every healthy worker has been tried"),
              std::string::npos)
        << r.status.error_message();
  }
  EXPECT_EQ(Metric("llm_router_retries_total"), 0);
  EXPECT_TRUE(View(*w).ejected);
  w->SetBehaviour(FakeBehaviour{});  // recovered
  const Result r = Call(*stub_);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.messages, 8);
}

TEST_F(ProxyTest, ClientErrorsAreNotRetriedAndNeverEject) {
  FakeBehaviour invalid;
  invalid.messages = 0;
  invalid.fail_code = grpc::StatusCode::INVALID_ARGUMENT;
  invalid.fail_message = "sampling.top_p: 7 is outside (0, 1]";
  auto a = FakeWorker::Start(invalid);
  auto b = FakeWorker::Start(invalid);
  StartRouter({a->address(), b->address()});
  WaitHealthy(2);
  for (int i = 0; i < 10; ++i) {
    const Result r = Call(*stub_);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(r.status.error_message(), "sampling.top_p: 7 is outside (0, 1]");
  }
  EXPECT_EQ(a->generate_calls() + b->generate_calls(), 10);  // one attempt each
  EXPECT_FALSE(View(*a).ejected);
  EXPECT_FALSE(View(*b).ejected);
}

TEST_F(ProxyTest, FailureAfterTheFirstMessageEndsTheStreamNamingTheWorker) {
  FakeBehaviour mid;
  mid.messages = 3;
  mid.fail_code = grpc::StatusCode::UNAVAILABLE;
  mid.fail_message = "Socket closed";
  auto a = FakeWorker::Start(mid);
  auto b = FakeWorker::Start(FakeBehaviour{});
  StartRouter({a->address()});
  WaitHealthy(1);
  const Result r = Call(*stub_);
  EXPECT_EQ(r.messages, 3);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(r.status.error_message().find(a->address()), std::string::npos)
      << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("after the stream started"), std::string::npos);
  EXPECT_EQ(a->generate_calls(), 1);  // not retried
  EXPECT_EQ(b->generate_calls(), 0);
}

// A worker that is full refuses before doing anything (RESOURCE_EXHAUSTED with a retry hint):
// the call goes to another worker with room (the pool's view is a load report old, so a burst
// can fill the pick); the full worker is not held to account. Where none has room, the client
// gets the refusal as the worker gave it. (Each got a 429 while the cluster had room.)
TEST_F(ProxyTest, AFullWorkersRefusalGoesToAnotherWorker) {
  FakeBehaviour full;
  full.messages = 0;
  full.fail_code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  full.fail_message = "the worker is full: 2 requests in flight (1 slots + 1 queued); retry later";
  full.fail_trailers = {{"grpc-retry-pushback-ms", "700"}};
  auto a = FakeWorker::Start(full);
  auto b = FakeWorker::Start(FakeBehaviour{});
  StartRouter({a->address(), b->address()});
  WaitHealthy(2);
  for (int i = 0; i < 10; ++i) {
    const Result r = Call(*stub_);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.messages, 8);
  }
  EXPECT_GT(a->generate_calls(), 0) << "the full worker was never picked: nothing tested";
  EXPECT_EQ(b->generate_calls(), 10);
  EXPECT_EQ(Metric("llm_router_retries_total"), a->generate_calls());  // each moved once
  EXPECT_FALSE(View(*a).ejected);

  // RESOURCE_EXHAUSTED without a retry hint, or after messages, is the worker's own answer:
  // unchanged, not retried.
  FakeBehaviour no_hint = full;
  no_hint.fail_trailers.clear();
  no_hint.fail_message = "kv cache full";
  FakeBehaviour late = full;
  late.messages = 2;
  for (const FakeBehaviour& own : {no_hint, late}) {
    a->SetBehaviour(own);
    b->SetBehaviour(own);
    const int64_t calls = a->generate_calls() + b->generate_calls();
    const Result r = Call(*stub_);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(r.status.error_message(), own.fail_message);
    EXPECT_EQ(r.messages, own.messages);
    EXPECT_EQ(a->generate_calls() + b->generate_calls(), calls + 1) << "retried";
  }
  a->SetBehaviour(full);

  b->SetBehaviour(full);  // both full: the client gets the last refusal, hint included
  const Result r = Call(*stub_);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(r.status.error_message(), full.fail_message);
  EXPECT_EQ(r.trailers.at("grpc-retry-pushback-ms"), "700");
  EXPECT_FALSE(View(*a).ejected);
  EXPECT_FALSE(View(*b).ejected);

  // A sole full worker: its refusal, once (nowhere else to go).
  a->SetBehaviour(FakeBehaviour{});
  const int64_t before = b->generate_calls();
  router_.reset();
  StartRouter({b->address()});
  WaitHealthy(1);
  const Result sole = Call(*stub_);
  EXPECT_EQ(sole.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(sole.status.error_message(), full.fail_message);
  EXPECT_EQ(sole.trailers.at("grpc-retry-pushback-ms"), "700");
  EXPECT_EQ(b->generate_calls(), before + 1);
}

TEST_F(ProxyTest, AWorkersOwnErrorAfterSomeMessagesReachesTheClientUnchanged) {
  FakeBehaviour mid;
  mid.messages = 3;
  mid.fail_code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  mid.fail_message = "kv cache full";
  auto w = FakeWorker::Start(mid);
  StartRouter({w->address()});
  WaitHealthy(1);
  const Result r = Call(*stub_);
  EXPECT_EQ(r.messages, 3);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(r.status.error_message(), "kv cache full");
  EXPECT_FALSE(View(*w).ejected);
}

TEST_F(ProxyTest, ClientsThatStopReadingDoNotStallOthersOnTheSameWorkerConnection) {
  // Each call streams ~2.6 MB, more than a worker stream's 1 MiB window.
  FakeBehaviour big;
  big.messages = 40;
  big.text_bytes = 64 * 1024;
  auto w = FakeWorker::Start(big);
  configure_ = [](RouterConfig* c) {
    c->threads = 1;
    c->proxy.upstream_connections = 1;  // every call on one worker connection
  };
  StartRouter({w->address()});
  WaitHealthy(1);
  // 70 calls whose client reads one message and then nothing: together they would hold more
  // than the worker connection's 64 MiB window if it were credited only as bytes leave.
  // Their client takes little into its own buffers (a 64 KiB window, no BDP growth), so the
  // rest waits in the router.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto slow = llm::v1::Generation::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(router_->port()), grpc::InsecureChannelCredentials(), args));
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<llm::v1::GenerateResponse>>> stuck;
  for (int i = 0; i < 70; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    stuck.push_back(slow->Generate(contexts.back().get(), llm::v1::GenerateRequest{}));
    llm::v1::GenerateResponse resp;
    ASSERT_TRUE(stuck.back()->Read(&resp));
  }
  // They have filled what the router and the worker connection take for them when the worker's
  // writes stop completing: its count of written messages holds still for 300 ms.
  int64_t written = -1;
  auto changed = std::chrono::steady_clock::now();
  ASSERT_TRUE(llm::testing::WaitFor(
      [&] {
        const auto now = std::chrono::steady_clock::now();
        if (const int64_t n = w->written_messages(); n != written) {
          written = n;
          changed = now;
          return false;
        }
        return now - changed >= std::chrono::milliseconds(300);
      },
      std::chrono::seconds(20)))
      << w->written_messages() << " messages written";
  EXPECT_LT(w->written_messages(), 70 * 40) << "the stuck calls were not held back";
  // A call that reads goes through, on a connection of its own to the router.
  auto other = llm::v1::Generation::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(router_->port()), grpc::InsecureChannelCredentials()));
  const Result r = Call(*other, /*deadline_ms=*/10000);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.messages, 40);
  for (auto& c : contexts) c->TryCancel();
  for (auto& s : stuck) (void)s->Finish();
}

TEST_F(ProxyTest, DeadlinesAndCancelsReachTheWorker) {
  FakeBehaviour hold;
  hold.messages = 1;
  hold.hold = true;
  auto w = FakeWorker::Start(hold);
  StartRouter({w->address()});
  WaitHealthy(1);
  // Deadline: the worker sees it, and the stream ends with DEADLINE_EXCEEDED.
  const Result r = Call(*stub_, /*deadline_ms=*/400);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(r.messages, 1);
  EXPECT_GT(w->last_deadline_ms(), 100);
  EXPECT_LE(w->last_deadline_ms(), 400);
  // The expired stream closes at the worker too (asynchronously: the router and the worker each
  // see the deadline on their own clocks).
  EXPECT_TRUE(
      llm::testing::WaitFor([&] { return w->open_calls() == 0; }, std::chrono::milliseconds(1000)))
      << w->open_calls() << " calls still open at the worker";
  // The router counts them as DEADLINE_EXCEEDED, though the client's own reset at its deadline
  // usually reaches it before its timer fires (it counted most as CANCELLED).
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Call(*stub_, /*deadline_ms=*/150).status.error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  const std::string deadline = "llm_router_requests_total{code=\"DEADLINE_EXCEEDED\"}";
  EXPECT_TRUE(llm::testing::WaitFor([&] { return Metric(deadline) >= 5; },
                                    std::chrono::milliseconds(1000)));
  EXPECT_EQ(Metric(deadline), 5);
  EXPECT_EQ(Metric("llm_router_requests_total{code=\"CANCELLED\"}"), -1);  // none
  // The expired streams close at the worker on its own clock, after the router counted them: on
  // a loaded machine one may still be open here, so wait for that before counting again.
  ASSERT_TRUE(
      llm::testing::WaitFor([&] { return w->open_calls() == 0; }, std::chrono::milliseconds(5000)))
      << w->open_calls() << " calls still open at the worker";
  // Cancel after the first message: the worker's stream is cancelled too.
  {
    grpc::ClientContext ctx;
    llm::v1::GenerateRequest req;
    auto reader = stub_->Generate(&ctx, req);
    llm::v1::GenerateResponse resp;
    ASSERT_TRUE(reader->Read(&resp));
    EXPECT_EQ(w->open_calls(), 1);
    EXPECT_EQ(View(*w).in_flight, 1);
    ctx.TryCancel();
    while (reader->Read(&resp)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(llm::testing::WaitFor([&] { return w->open_calls() == 0 && View(*w).in_flight == 0; },
                                    std::chrono::milliseconds(1000)))
      << w->open_calls() << " calls open at the worker, " << View(*w).in_flight
      << " in flight at the router";
  EXPECT_GE(w->cancelled_calls(), 2);
}

TEST_F(ProxyTest, NoWorkerIsUnavailableWithin100Ms) {
  StartRouter({"127.0.0.1:1"});  // nothing listens there
  for (int i = 0; i < 5; ++i) {
    const Result r = Call(*stub_);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_LT(r.seconds, 0.1);
  }
}

TEST_F(ProxyTest, AllSaturatedIsResourceExhausted) {
  auto w = FakeWorker::Start(FakeBehaviour{});
  llm::v1::LoadReport full = w->load();
  full.set_max_slots(8);
  full.set_free_slots(0);
  full.set_running_requests(8);
  full.set_queued_requests(100);
  w->SetLoad(full);
  StartRouter({w->address()});
  WaitHealthy(1);
  ASSERT_TRUE(llm::testing::WaitFor([&] { return View(*w).report.queued_requests == 100; },
                                    std::chrono::milliseconds(1000)));
  const Result r = Call(*stub_);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(w->generate_calls(), 0);
  // When to retry: a positive number of milliseconds, which gRPC's retry policy honours.
  ASSERT_TRUE(r.trailers.count("grpc-retry-pushback-ms")) << r.status.error_message();
  EXPECT_GE(std::stoll(r.trailers.at("grpc-retry-pushback-ms")), 10);
}

// An injected resolver's answer, which the test changes. The router's discovery threads may
// call it until the fixture stops the router, after the test's locals are gone: they share it.
class FakeResolver : public std::enable_shared_from_this<FakeResolver> {
 public:
  explicit FakeResolver(absl::StatusOr<std::vector<std::string>> answer)
      : answer_(std::move(answer)) {}
  void Set(absl::StatusOr<std::vector<std::string>> answer) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = std::move(answer);
  }
  int lookups() {
    std::lock_guard<std::mutex> lock(mu_);
    return lookups_;
  }
  // The resolver for the router: answers lookups of `name` (anything else fails the test).
  DnsDiscovery::Resolve Resolve(const std::string& name) {
    return [self = shared_from_this(),
            name](const std::string& n) -> absl::StatusOr<std::vector<std::string>> {
      EXPECT_EQ(n, name);
      std::lock_guard<std::mutex> lock(self->mu_);
      ++self->lookups_;
      return self->answer_;
    };
  }

 private:
  std::mutex mu_;
  absl::StatusOr<std::vector<std::string>> answer_;
  int lookups_ = 0;
};

TEST_F(ProxyTest, DiscoveryPicksUpWorkersThatAppearAndVanish) {
  auto a = FakeWorker::Start(FakeBehaviour{});
  auto b = FakeWorker::Start(FakeBehaviour{});
  auto resolver = std::make_shared<FakeResolver>(std::vector<std::string>{a->address()});
  auto set = [&](absl::StatusOr<std::vector<std::string>> v) { resolver->Set(std::move(v)); };
  StartRouter({}, 3, resolver->Resolve("workers.test:1"));
  WaitPool({a->address()});
  WaitHealthy(1);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Call(*stub_).status.ok());
  EXPECT_EQ(a->generate_calls(), 5);

  // b appears: it is watched and takes traffic, with no restart.
  set(std::vector<std::string>{a->address(), b->address()});
  WaitPool({a->address(), b->address()});
  WaitHealthy(2);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Call(*stub_).status.ok());
  EXPECT_GT(b->generate_calls(), 5);

  // A failed lookup keeps the set.
  set(absl::UnavailableError("resolver down"));
  const int lookups_before = resolver->lookups();
  // Two lookups after the change: the first failed one has been applied when the second runs.
  ASSERT_TRUE(llm::testing::WaitFor([&] { return resolver->lookups() >= lookups_before + 2; },
                                    std::chrono::seconds(5)));
  WaitPool({a->address(), b->address()});

  // a vanishes: no call reaches it any more.
  set(std::vector<std::string>{b->address()});
  WaitPool({b->address()});
  const int64_t a_calls = a->generate_calls();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Call(*stub_).status.ok());
  EXPECT_EQ(a->generate_calls(), a_calls);

  // None left: UNAVAILABLE at once.
  set(std::vector<std::string>{});
  WaitPool({});
  const Result r = Call(*stub_);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(r.seconds, 0.1);
}

// A static worker named by host name is connected to where discovery resolved the name (on its
// own thread, at start and every discovery.dns_refresh_ms), never looked up on the relay's
// loops. To see which address the relay used, the name's load watch and its calls go to
// different fake workers: the name is "ipv4:127.0.0.1:<a's port>", which gRPC's load watch
// reaches without any lookup (a fresh root has no /etc/hosts and CI may have no DNS) and which
// the relay takes for a host name, and the injected resolver answers b's address for it. A name
// that does not resolve yet fails its calls at once, and serves once it does.
TEST_F(ProxyTest, AWorkerNamedByHostNameIsConnectedWhereDiscoveryResolvedIt) {
  auto a = FakeWorker::Start(FakeBehaviour{});
  auto b = FakeWorker::Start(FakeBehaviour{});
  const std::string name = "ipv4:" + a->address();
  auto resolver = std::make_shared<FakeResolver>(
      absl::UnavailableError("cannot resolve " + name + ": temporary failure"));
  auto set = [&](absl::StatusOr<std::vector<std::string>> v) { resolver->Set(std::move(v)); };
  StartRouter({name}, 3, resolver->Resolve(name), /*static_names=*/true);
  WaitHealthy(1);  // its load watch, through gRPC's own resolver
  const Result early = Call(*stub_);
  EXPECT_EQ(early.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(early.seconds, 1.0);
  set(std::vector<std::string>{b->address()});
  // The next refresh, within 50 ms.
  ASSERT_TRUE(
      llm::testing::WaitFor([&] { return Call(*stub_).status.ok(); }, std::chrono::seconds(2)));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Call(*stub_).status.ok());
  EXPECT_EQ(b->generate_calls(), 6);
  EXPECT_EQ(a->generate_calls(), 0);
}

TEST_F(ProxyTest, AWorkerGoneSilentIsFoundByKeepalivePings) {
  FakeBehaviour hold;
  hold.messages = 1;
  hold.hold = true;
  auto w = FakeWorker::Start(hold);
  llm::testing::TcpForwarder link(w->port());
  configure_ = [](RouterConfig* c) {
    c->proxy.keepalive = std::chrono::milliseconds(200);
    c->proxy.keepalive_timeout = std::chrono::milliseconds(300);
  };
  StartRouter({link.address()});
  WaitHealthy(1);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto reader = stub_->Generate(&ctx, llm::v1::GenerateRequest{});
  llm::v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  // The worker's host vanishes: no FIN, no RST, just silence.
  link.Freeze();
  const auto frozen_at = std::chrono::steady_clock::now();
  while (reader->Read(&resp)) {
  }
  const grpc::Status st = reader->Finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen_at).count();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_NE(st.error_message().find(link.address()), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("keepalive"), std::string::npos) << st.error_message();
  EXPECT_LT(seconds, 2.0);  // keepalive + timeout is 0.5 s
}

// A health Watch through the router sits idle while the relay pings its connection to the
// in-process server (proxy.keepalive_ms): that server must not answer GOAWAY "too many pings"
// (gRPC's default policy did after three pings, ending every pass-through stream).
TEST_F(ProxyTest, AnIdleHealthWatchOutlivesManyKeepalivePings) {
  auto w = FakeWorker::Start(FakeBehaviour{});
  configure_ = [](RouterConfig* c) {
    c->proxy.keepalive = std::chrono::milliseconds(100);  // a ping about every 200 ms
    c->proxy.keepalive_timeout = std::chrono::milliseconds(100);
  };
  StartRouter({w->address()});
  WaitHealthy(1);
  grpc::GenericStub stub(channel_);
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, "/grpc.health.v1.Health/Watch", &cq);
  void* tag = nullptr;
  bool ok = false;
  const auto next = [&](int timeout_ms) {
    return cq.AsyncNext(&tag, &ok,
                        std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_EQ(next(5000), grpc::CompletionQueue::GOT_EVENT);
  ASSERT_TRUE(ok);
  grpc::Slice empty;
  const grpc::ByteBuffer request(&empty, 1);  // HealthCheckRequest{}: the whole server
  call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  ASSERT_EQ(next(5000), grpc::CompletionQueue::GOT_EVENT);
  ASSERT_TRUE(ok);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_EQ(next(5000), grpc::CompletionQueue::GOT_EVENT);
  ASSERT_TRUE(ok) << "no first status";
  // Several pings' worth of silence: the stream stays open (no status change to report).
  call->Read(&response, reinterpret_cast<void*>(4));
  EXPECT_EQ(next(1500), grpc::CompletionQueue::TIMEOUT) << "the watch ended (ok " << ok << ")";
  ctx.TryCancel();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  for (int i = 0; i < 2; ++i) next(5000);  // the read, then the finish
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(ProxyTest, AConnectThatHangsTimesOut) {
  auto w = FakeWorker::Start(FakeBehaviour{});
  llm::testing::TcpForwarder link(w->port());
  configure_ = [](RouterConfig* c) { c->proxy.connect_timeout = std::chrono::milliseconds(300); };
  StartRouter({link.address()});
  WaitHealthy(1);  // the load watch's connection is up
  // New connections to the worker now hang in the handshake.
  link.StopAccepting();
  const Result r = Call(*stub_);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("connect timed out"), std::string::npos)
      << r.status.error_message();
  EXPECT_LT(r.seconds, 2.0);
}

TEST_F(ProxyTest, ManyConcurrentStreamsAreCountedPerWorker) {
  FakeBehaviour hold;
  hold.messages = 1;
  hold.hold = true;
  auto a = FakeWorker::Start(hold);
  auto b = FakeWorker::Start(hold);
  StartRouter({a->address(), b->address()});
  WaitHealthy(2);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<llm::v1::GenerateResponse>>> readers;
  for (int i = 0; i < 40; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(stub_->Generate(contexts.back().get(), llm::v1::GenerateRequest{}));
    llm::v1::GenerateResponse resp;
    ASSERT_TRUE(readers.back()->Read(&resp));
  }
  EXPECT_EQ(View(*a).in_flight + View(*b).in_flight, 40);
  EXPECT_GT(View(*a).in_flight, 5);  // spread by in-flight count (the fake's load is constant)
  EXPECT_GT(View(*b).in_flight, 5);
  for (auto& c : contexts) c->TryCancel();
  for (auto& r : readers) (void)r->Finish();
  EXPECT_TRUE(llm::testing::WaitFor([&] { return View(*a).in_flight + View(*b).in_flight == 0; },
                                    std::chrono::milliseconds(1000)))
      << View(*a).in_flight + View(*b).in_flight << " still in flight";
}

}  // namespace
}  // namespace llm::router
