// The router's data plane: an HTTP/2 server that relays each llm.v1.Generation call to a worker
// picked by the pool, byte for byte, on nghttp2 sessions driven by epoll loops (one per core).
// Calls to other services (health, reflection) are relayed unbuffered to the in-process gRPC
// server named by RelayOptions::internal_target.
//
// A Generation call is relayed once its request has fully arrived. It is retried on another
// worker only while nothing of the response has reached the client, and only when the worker
// failed to serve it (gRPC UNAVAILABLE, a refused or reset stream, a lost connection); a
// worker's own answer (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...) is the client's. After the
// first response bytes, a worker failure ends the stream at once with UNAVAILABLE naming the
// worker. The client's deadline (grpc-timeout) is enforced here and passed on, reduced by the
// time spent; a client's reset cancels the worker's stream. Response bytes leave in as few
// frames and writes as the client's flow control allows: messages that arrive together are
// sent together.
#ifndef LLM_ROUTER_RELAY_RELAY_SERVER_H_
#define LLM_ROUTER_RELAY_RELAY_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "router/pool/worker_addresses.h"
#include "router/pool/worker_pool.h"

namespace llm::router {

struct ProxyOptions {
  int max_attempts = 3;                 // workers tried per request before its status is returned
  int64_t max_message_bytes = 4 << 20;  // largest request
  int64_t max_in_flight = 10000;        // calls in progress; more get RESOURCE_EXHAUSTED
  // HTTP/2 connections each event loop keeps to each worker; a client connection's calls all
  // use one of them (chosen in turn as clients connect).
  int upstream_connections = 4;
  // A worker connection still connecting after this long is closed (its calls are retried).
  std::chrono::milliseconds connect_timeout{2000};
  // A worker connection with calls open and nothing received for keepalive gets an HTTP/2
  // PING; nothing received within keepalive_timeout after it closes the connection, ending its
  // calls (retried when nothing reached the client yet). Finds workers that vanished without
  // closing their connections (a lost node). The workers accept pings every 10 s.
  std::chrono::milliseconds keepalive{15000};
  std::chrono::milliseconds keepalive_timeout{5000};
};

// Call-level events, for metrics (any loop thread).
class ProxyObserver {
 public:
  virtual ~ProxyObserver() = default;
  // A call ended with gRPC status `code` after `attempts` workers (0: refused before any).
  // `model`: the name the last worker it reached reports (model.name; empty when it reached
  // none), never the client's text, so the label's values stay the served models.
  virtual void OnCallDone(int code, int attempts, const std::string& model) = 0;
  virtual void OnRetry() = 0;
  virtual void OnUpstreamError(const std::string& worker, int code) = 0;
  virtual void OnFirstMessage(double seconds_since_arrival, const std::string& model) = 0;
  virtual void OnRelayed(int64_t messages) = 0;
};

// gRPC status codes the relay makes or reads.
enum GrpcCode : int {
  kGrpcOk = 0,
  kGrpcCancelled = 1,
  kGrpcUnknown = 2,
  kGrpcInvalidArgument = 3,
  kGrpcDeadlineExceeded = 4,
  kGrpcResourceExhausted = 8,
  kGrpcUnauthenticated = 16,
  kGrpcInternal = 13,
  kGrpcUnavailable = 14,
};

// Whether a worker's status means it failed to serve (worth another worker, and counted toward
// its ejection) rather than answered.
inline bool IsWorkerFailure(int code) { return code == kGrpcUnavailable; }

class RelaySecurity;

// The OpenAI front's limits on slow, idle and too many clients (router.http_*).
struct HttpLimits {
  // A request's headers and body must arrive within this, from its first byte (a new
  // connection's first request: from the accept); else the connection is closed. 0: none.
  double read_timeout_seconds = 30;
  // A keep-alive connection with no request in progress is closed after this. 0: never.
  double idle_timeout_seconds = 60;
  // Open connections at once, in all and per client address; past either, a new connection
  // is answered 503 with Retry-After and closed. 0: no cap.
  int max_connections = 4096;
  // Off by default: behind an ingress or a load balancer every client shares its address.
  int max_connections_per_client = 0;
};

// What the front's limits did, since the start (metrics).
struct HttpConnectionStats {
  int64_t open = 0;
  uint64_t read_timeouts = 0;       // closed: a request did not arrive in time
  uint64_t idle_timeouts = 0;       // closed: idle between requests
  uint64_t refused = 0;             // refused: max_connections
  uint64_t refused_per_client = 0;  // refused: max_connections_per_client
};

namespace relay {
class HttpGate;
struct RelayOptions;
struct LoopContext;
class Acceptor;
}  // namespace relay

class RelayServer {
 public:
  struct Options {
    std::string listen = "0.0.0.0:50050";
    int threads = 0;  // event loops; 0: one per core
    ProxyOptions proxy;
    std::string internal_target;  // host:port of the in-process gRPC server
    // The OpenAI-compatible HTTP/1.1 API (host:port or :port); empty: none.
    std::string http_listen;
    HttpLimits http_limits;
    // A body field no OpenAI reference has is ignored (logged once) rather than a 400.
    bool http_ignore_unknown_fields = false;
    // TLS on both legs and the bearer token; null: plaintext, no token. Not owned.
    const RelaySecurity* security = nullptr;
    // Where workers named by host name are connected to (resolved off the loops); null: only
    // numeric worker addresses can be reached. Not owned.
    WorkerAddresses* addresses = nullptr;
  };
  RelayServer(WorkerPool* pool, const Options& options, ProxyObserver* observer);
  ~RelayServer();

  // Binds and starts the loops. UNAVAILABLE naming the address when it cannot listen.
  absl::Status Start();
  // Stops taking calls: the listening socket closes and every client connection gets a GOAWAY
  // (calls it already started go on; a gRPC client sends new ones elsewhere). Returns once the
  // socket is closed, so a connect after it is refused.
  void StartDrain();
  // Closes every connection (calls in progress end) and joins the loops.
  void Stop();

  int port() const { return port_; }
  int http_port() const { return http_port_; }  // 0: no HTTP API
  int64_t in_flight() const { return in_flight_.load(); }
  HttpConnectionStats http_stats() const;

 private:
  WorkerPool* pool_;
  std::unique_ptr<relay::RelayOptions> options_;
  ProxyObserver* observer_;
  std::unique_ptr<relay::HttpGate> http_gate_;  // outlives the loops' connections
  std::vector<std::unique_ptr<relay::LoopContext>> loops_;
  std::vector<std::thread> threads_;
  std::unique_ptr<relay::Acceptor> acceptor_;
  std::unique_ptr<relay::Acceptor> http_acceptor_;
  int listen_fd_ = -1;
  int port_ = 0;
  int http_fd_ = -1;
  int http_port_ = 0;
  std::atomic<int64_t> in_flight_{0};
  bool started_ = false;
  bool draining_ = false;
};

// Binds and listens on host:port ("0.0.0.0:50050", "[::]:0", "127.0.0.1:0"), non-blocking;
// `*port` is the port bound. Errors name `key` (the configuration key) and the address.
absl::StatusOr<int> ListenTcp(const std::string& address, int* port, const std::string& key);

}  // namespace llm::router

#endif  // LLM_ROUTER_RELAY_RELAY_SERVER_H_
