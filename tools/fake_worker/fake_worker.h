// A stand-in llm-worker for router tests and benchmarks: serves llm.v1.Generation and
// llm.v1.WorkerLoad on loopback with scripted behaviour instead of a model. Generate streams a
// fixed number of small messages as fast as the transport takes them (so a proxy in front of it
// is the bottleneck), or fails with a chosen status after some messages, or holds the stream
// until cancelled. Each message carries `text_bytes` of 'x' and token id 1; the last one the
// finish reason and usage (3 prompt tokens). WatchLoad reports a load the test sets (model
// "fake-model" until then).
#ifndef LLM_TOOLS_FAKE_WORKER_FAKE_WORKER_H_
#define LLM_TOOLS_FAKE_WORKER_FAKE_WORKER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "llm/v1/worker_load.pb.h"

namespace llm::tools {

struct FakeBehaviour {
  int messages = 8;    // response messages per Generate (the last one carries finish_reason)
  int text_bytes = 4;  // text per message
  // Status to end Generate with after `messages` messages; OK streams normally.
  grpc::StatusCode fail_code = grpc::StatusCode::OK;
  std::string fail_message = "scripted failure";
  std::map<std::string, std::string> fail_trailers;  // trailing metadata of that status
  bool hold = false;  // after the messages, keep the stream open until cancelled
  std::chrono::microseconds per_message_delay{0};
};

class FakeWorker {
 public:
  // Listens on 127.0.0.1:0 (or `port`).
  static std::unique_ptr<FakeWorker> Start(const FakeBehaviour& behaviour, int port = 0);
  ~FakeWorker();

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void SetBehaviour(const FakeBehaviour& behaviour);
  FakeBehaviour behaviour() const;
  // The load WatchLoad reports from now on (pushed to watchers at once).
  void SetLoad(const llm::v1::LoadReport& report);
  llm::v1::LoadReport load() const;
  // Stops serving: open streams end, the port closes.
  void Shutdown();

  // Counters.
  int64_t generate_calls() const { return counters_.calls.load(); }
  int64_t cancelled_calls() const { return counters_.cancelled.load(); }
  int64_t open_calls() const { return counters_.open.load(); }
  // Messages whose write completed (the transport took them), over every stream.
  int64_t written_messages() const { return counters_.written.load(); }
  // The deadline the last Generate call carried, in ms from its arrival (-1: none).
  int64_t last_deadline_ms() const { return counters_.deadline_ms.load(); }

  // What the Generate service counts, shared with its streams.
  struct Counters {
    std::atomic<int64_t> calls{0}, cancelled{0}, open{0}, written{0};
    std::atomic<int64_t> deadline_ms{-1};
  };

  // Internal: the services' shared state.
  struct State;

 private:
  FakeWorker() = default;
  std::shared_ptr<State> state_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Service> generation_, load_;
  int port_ = 0;
  Counters counters_;
  friend struct State;
};

}  // namespace llm::tools

#endif  // LLM_TOOLS_FAKE_WORKER_FAKE_WORKER_H_
