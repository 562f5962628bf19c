#include "tests/grpc_test_util.h"

#include <grpcpp/generic/generic_stub.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "nlohmann/json.hpp"

namespace llm::testing {

void ServerProcess::Launch(const std::vector<std::string>& argv, const std::string& port_label,
                           int timeout_ms) {
  process_ = ChildProcess::Start(argv);
  const std::string line = process_->WaitForLine("metrics on port", timeout_ms);
  if (line.empty()) {
    ADD_FAILURE() << argv[0] << " did not start; output:\n" << process_->Output();
    return;
  }
  const std::string label = port_label + " ", metrics = "metrics on port ";
  std::sscanf(line.c_str() + line.find(label) + label.size(), "%d", &port_);
  std::sscanf(line.c_str() + line.find(metrics) + metrics.size(), "%d", &metrics_port_);
  channel_ = grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
}

std::unique_ptr<WorkerProcess> WorkerProcess::Start(const std::string& model,
                                                    const std::vector<std::string>& extra) {
  auto w = std::unique_ptr<WorkerProcess>(new WorkerProcess());
  const std::string path = model.empty() || model[0] == '/' ? model : SharedPath(model);
  std::vector<std::string> argv{BinPath("llm-worker"), "--server.listen", "127.0.0.1:0",
                                "--server.metrics_listen", "127.0.0.1:0"};
  if (!path.empty()) {
    argv.push_back("--model.path");
    argv.push_back(path);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  // "llm-worker: serving MODEL on port N, metrics on port M"
  w->Launch(argv, "on port", 60000);
  return w;
}

std::unique_ptr<RouterProcess> RouterProcess::Start(const std::string& workers,
                                                    const std::vector<std::string>& extra) {
  auto r = std::unique_ptr<RouterProcess>(new RouterProcess());
  std::vector<std::string> argv{BinPath("llm-router"),
                                "--router.listen",
                                "127.0.0.1:0",
                                "--router.metrics_listen",
                                "127.0.0.1:0",
                                "--router.http_listen",
                                "127.0.0.1:0",
                                "--discovery.workers",
                                workers};
  argv.insert(argv.end(), extra.begin(), extra.end());
  r->Launch(argv, "routing on port", 20000);
  const std::string out = r->process().Output(), label = "http on port ";
  if (const size_t at = out.find(label); at != std::string::npos) {
    std::sscanf(out.c_str() + at + label.size(), "%d", &r->http_port_);
  }
  return r;
}

bool RouterProcess::WaitReady(int n, int timeout_ms) const {
  return WaitFor(
      [&] {
        return MetricValue(HttpGet(metrics_port(), "/metrics"),
                           "llm_router_workers{state=\"ready\"}") >= n;
      },
      std::chrono::milliseconds(timeout_ms));
}

namespace {

// One call of GenerateConcurrently.
class ConcurrentCall : public grpc::ClientReadReactor<llm::v1::GenerateResponse> {
 public:
  ConcurrentCall(TimedResult* result, bool cancel_after_first, std::mutex* mu,
                 std::condition_variable* cv, int* remaining)
      : result_(result),
        cancel_after_first_(cancel_after_first),
        mu_(mu),
        cv_(cv),
        remaining_(remaining) {}
  void Start(llm::v1::Generation::Stub* stub, const llm::v1::GenerateRequest& request,
             int deadline_ms) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(deadline_ms));
    request_ = request;
    stub->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (result_->messages++ == 0) {
      result_->first_message = std::chrono::steady_clock::now();
      if (cancel_after_first_) context_.TryCancel();
    }
    result_->text += response_.text();
    result_->token_ids.insert(result_->token_ids.end(), response_.token_ids().begin(),
                              response_.token_ids().end());
    result_->last = response_;
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    result_->status = status;
    result_->end = std::chrono::steady_clock::now();
    // The call (its ClientContext) is gone before the waiter can wake: once the last one counts
    // down, the caller may destroy the stub and its channel, and a context still being
    // destroyed on a gRPC thread then would race with that.
    std::mutex* mu = mu_;
    std::condition_variable* cv = cv_;
    int* remaining = remaining_;
    delete this;
    std::lock_guard<std::mutex> lock(*mu);
    if (--*remaining == 0) cv->notify_all();
  }

 private:
  TimedResult* result_;
  bool cancel_after_first_;
  std::mutex* mu_;
  std::condition_variable* cv_;
  int* remaining_;
  grpc::ClientContext context_;
  llm::v1::GenerateRequest request_;
  llm::v1::GenerateResponse response_;
};

}  // namespace

std::vector<TimedResult> GenerateConcurrently(const std::vector<llm::v1::Generation::Stub*>& stubs,
                                              const std::vector<llm::v1::GenerateRequest>& requests,
                                              int deadline_ms,
                                              const std::vector<bool>& cancel_after_first) {
  std::vector<TimedResult> results(requests.size());
  std::mutex mu;
  std::condition_variable cv;
  int remaining = static_cast<int>(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    auto* call = new ConcurrentCall(
        &results[i], i < cancel_after_first.size() && cancel_after_first[i], &mu, &cv, &remaining);
    call->Start(stubs[i % stubs.size()], requests[i], deadline_ms);
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return remaining == 0; });
  return results;
}

Golden LoadGolden() {
  std::ifstream f(SharedPath("golden/tinystories-656k.jsonl"));
  std::string line;
  std::getline(f, line);
  const auto j = nlohmann::json::parse(line);
  const std::string prompt = j["prompt"];
  return {prompt, j["text"].get<std::string>().substr(prompt.size()),
          j["generated_ids"].get<std::vector<int32_t>>()};
}

GenerateResult Generate(llm::v1::Generation::Stub& stub, const llm::v1::GenerateRequest& request,
                        int deadline_ms, int read_delay_ms) {
  GenerateResult r;
  grpc::ClientContext ctx;
  if (deadline_ms > 0) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  }
  auto reader = stub.Generate(&ctx, request);
  llm::v1::GenerateResponse resp;
  for (;;) {
    // A deliberate duration: the slow reader the caller asked for.
    if (read_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(read_delay_ms));
    if (!reader->Read(&resp)) break;
    ++r.messages;
    r.text += resp.text();
    r.token_ids.insert(r.token_ids.end(), resp.token_ids().begin(), resp.token_ids().end());
    r.last = resp;
  }
  r.status = reader->Finish();
  for (const auto& [k, v] : ctx.GetServerTrailingMetadata()) {
    r.trailers[std::string(k.data(), k.size())] = std::string(v.data(), v.size());
  }
  return r;
}

llm::v1::GenerateRequest GreedyRequest(const std::string& text, uint32_t max_tokens) {
  llm::v1::GenerateRequest req;
  req.set_text(text);
  req.set_max_tokens(max_tokens);
  req.mutable_sampling()->set_temperature(0.0f);
  return req;
}

namespace {

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  (void)b.Dump(&slices);
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

}  // namespace

int HealthStatus(const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // HealthCheckRequest { string service = 1; }
  std::string req;
  if (!service.empty()) {
    req.push_back(0x0A);
    req.push_back(static_cast<char>(service.size()));
    req += service;
  }
  const grpc::ByteBuffer request = Bytes(req);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok()) return -static_cast<int>(status.error_code()) - 1;
  // HealthCheckResponse { ServingStatus status = 1; } -> 0x08 <status>; absent means 0.
  const std::string bytes = Flatten(response);
  return bytes.size() >= 2 && bytes[0] == 0x08 ? bytes[1] : 0;
}

std::vector<std::string> ReflectionServices(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::CompletionQueue cq;
  void* tag;
  bool ok;
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  // ServerReflectionRequest { string list_services = 7; }
  call->Write(Bytes(std::string("\x3A\x00", 2)), reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  call->WritesDone(reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  const std::string bytes = ok ? Flatten(response) : "";
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  // Service names appear as length-prefixed strings; pick out the dotted identifiers.
  std::vector<std::string> names;
  std::string current;
  for (char c : bytes) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_') {
      current.push_back(c);
    } else {
      if (current.find('.') != std::string::npos) names.push_back(current);
      current.clear();
    }
  }
  if (current.find('.') != std::string::npos) names.push_back(current);
  return names;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[8192];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

}  // namespace llm::testing
