// The router's second door: an OpenAI-compatible HTTP/1.1 server (router.http_listen).
//
//   POST /v1/chat/completions, POST /v1/completions   streaming (SSE) or not
//   GET  /v1/models                                    the models the healthy workers report
//   GET  /health                                       200 while serving, 503 while draining
//
// Connections live on their own epoll loops (relay::EventLoop, http-parser), so thousands of
// open SSE streams cost no thread each. A request becomes an llm.v1 GenerateRequest
// (openai_api.h) and is sent as a gRPC call through the relay itself, on an in-process socket
// pair the relay adopts as a plaintext client connection: the policy, retries before the first
// token, ejection, the bearer token (Authorization is passed on), metrics and cancellation are
// the gRPC path's, unchanged. A client that closes its connection cancels its call, which
// reaches the worker.
#ifndef LLM_ROUTER_HTTP_HTTP_FRONT_H_
#define LLM_ROUTER_HTTP_HTTP_FRONT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "router/pool/worker_pool.h"

namespace llm::router {

class RelaySecurity;

namespace http {

struct HttpFrontOptions {
  std::string listen = ":8000";
  int threads = 1;                          // event loops
  int64_t max_body_bytes = 4 << 20;         // larger bodies get 413
  const RelaySecurity* security = nullptr;  // bearer token for /v1/models; not owned
};

class HttpFront {
 public:
  // `connect` returns a channel into the relay (one per loop).
  HttpFront(const HttpFrontOptions& options, WorkerPool* pool,
            std::function<std::shared_ptr<grpc::Channel>()> connect);
  ~HttpFront();

  absl::Status Start();
  // /health answers 503, the listening socket closes; requests in progress go on.
  void StartDrain();
  // Closes every connection (calls in progress are cancelled) and joins the loops.
  void Stop();
  int port() const { return port_; }

  struct Loop;

 private:
  HttpFrontOptions options_;
  WorkerPool* pool_;
  std::function<std::shared_ptr<grpc::Channel>()> connect_;
  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<std::thread> threads_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  bool started_ = false;
};

}  // namespace http
}  // namespace llm::router

#endif  // LLM_ROUTER_HTTP_HTTP_FRONT_H_
