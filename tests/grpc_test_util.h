// Helpers for tests that talk to real llm-worker / llm-router processes over gRPC and HTTP.
#ifndef LLM_TESTS_GRPC_TEST_UTIL_H_
#define LLM_TESTS_GRPC_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llm/v1/generation.grpc.pb.h"
#include "llm/v1/worker_load.grpc.pb.h"
#include "tests/test_util.h"

namespace llm::testing {

// One of our servers started on loopback ports chosen by the OS, found from the line it prints
// ("... <label> N, metrics on port M").
class ServerProcess {
 public:
  ChildProcess& process() { return *process_; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  std::unique_ptr<llm::v1::Generation::Stub> generation() const {
    return llm::v1::Generation::NewStub(channel_);
  }

 protected:
  // Runs argv and waits for its ports line; a failure to start is a test failure (port() 0).
  void Launch(const std::vector<std::string>& argv, const std::string& port_label, int timeout_ms);

 private:
  std::unique_ptr<ChildProcess> process_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
};

// An llm-worker serving `model` (a ../shared path or an absolute one; empty when the flags or
// a --config file name it).
class WorkerProcess : public ServerProcess {
 public:
  static std::unique_ptr<WorkerProcess> Start(const std::string& model,
                                              const std::vector<std::string>& extra_flags = {});
};

// An llm-router in front of `workers` ("host:port,host:port").
class RouterProcess : public ServerProcess {
 public:
  static std::unique_ptr<RouterProcess> Start(const std::string& workers,
                                              const std::vector<std::string>& extra_flags = {});
  // Waits until /metrics shows `n` workers ready; false on timeout.
  bool WaitReady(int n, int timeout_ms = 20000) const;
  // The OpenAI-compatible HTTP API's port (router.http_listen 127.0.0.1:0).
  int http_port() const { return http_port_; }

 private:
  int http_port_ = 0;
};

struct GenerateResult {
  grpc::Status status;
  std::string text;
  std::vector<int32_t> token_ids;
  int messages = 0;
  llm::v1::GenerateResponse last;               // the final response (finish reason, usage)
  std::map<std::string, std::string> trailers;  // the server's trailing metadata
};

// Runs one Generate call to completion. `read_delay_ms` sleeps before each read (a slow
// reader); `deadline_ms` > 0 sets a deadline.
GenerateResult Generate(llm::v1::Generation::Stub& stub, const llm::v1::GenerateRequest& request,
                        int deadline_ms = 0, int read_delay_ms = 0);

llm::v1::GenerateRequest GreedyRequest(const std::string& text, uint32_t max_tokens);

// The first case of ../shared/golden/tinystories-656k.jsonl: its prompt, the greedy completion
// (text after the prompt) and the completion's ids.
struct Golden {
  std::string prompt, completion;
  std::vector<int32_t> ids;
};
Golden LoadGolden();

// One call of GenerateConcurrently: what it returned and when (steady clock).
struct TimedResult : GenerateResult {
  std::chrono::steady_clock::time_point first_message{};  // epoch when none came
  std::chrono::steady_clock::time_point end{};
};

// Starts every request at once (callback API, no thread per call) on the given stubs in turn
// and waits for all. `cancel_after_first[i]` cancels call i once its first message arrives.
std::vector<TimedResult> GenerateConcurrently(const std::vector<llm::v1::Generation::Stub*>& stubs,
                                              const std::vector<llm::v1::GenerateRequest>& requests,
                                              int deadline_ms = 120000,
                                              const std::vector<bool>& cancel_after_first = {});

// grpc.health.v1.Health/Check for `service` ("" = the server): 1 SERVING, 2 NOT_SERVING,
// negative when the call failed.
int HealthStatus(const std::shared_ptr<grpc::Channel>& channel, const std::string& service = "");

// The services listed by server reflection (grpc.reflection.v1alpha).
std::vector<std::string> ReflectionServices(const std::shared_ptr<grpc::Channel>& channel);

// Body of http://127.0.0.1:port/path, or "" on failure.
std::string HttpGet(int port, const std::string& path);

}  // namespace llm::testing

#endif  // LLM_TESTS_GRPC_TEST_UTIL_H_
