// The relay's connections and streams (internal to router/relay). All of one loop's objects
// are touched only by that loop's thread.
//
// One vocabulary for the two sides: the client (who called the router) and the worker.
//
//   ClientConnection  a client's HTTP/2 connection (server side of nghttp2); each stream is a
//                     CallClient, the client side of one call
//   HttpConnection    a client's HTTP/1.1 connection to the OpenAI front; also a CallClient
//   ClientCall        one call from a client: its request, the attempt in progress, and the
//                     response bytes not yet taken by the client side
//   WorkerConnection  this loop's HTTP/2 connection to one worker (client side of nghttp2)
//     WorkerAttempt   one attempt of a call on a worker
//
// A ClientCall lives until both its client side has closed and no attempt is in progress; a
// WorkerAttempt until its worker stream closes. Response bytes go from the worker's session into
// the ClientCall's buffer and out through its client side; the worker's flow control window is
// credited as they leave, so a slow client slows its worker stream only.
#ifndef LLM_ROUTER_RELAY_RELAY_INTERNAL_H_
#define LLM_ROUTER_RELAY_RELAY_INTERNAL_H_

#include <nghttp2/nghttp2.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "router/pool/worker_pool.h"
#include "router/relay/event_loop.h"
#include "router/relay/h2_connection.h"
#include "router/relay/relay_server.h"

namespace llm::router::relay {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct RelayOptions : RelayServer::Options {};

class WorkerConnection;
class WorkerAttempt;
class ClientConnection;
class HttpConnection;

// One loop's shared state.
struct LoopContext {
  EventLoop loop;
  WorkerPool* pool = nullptr;
  const RelayOptions* options = nullptr;
  ProxyObserver* observer = nullptr;
  std::atomic<int64_t>* in_flight = nullptr;
  bool stopping = false;  // no new worker connections
  bool draining = false;  // new client connections get a GOAWAY at once
  // Open, not draining, by address and lane ("host:port#lane").
  std::map<std::string, WorkerConnection*> workers;
  uint32_t next_lane = 0;  // the lane of the next client connection
  std::map<H2Connection*, std::unique_ptr<H2Connection>> connections;
  std::set<HttpConnection*> http_connections;  // the OpenAI front's (owned by the loop)
  HttpGate* http_gate = nullptr;               // their caps and timeouts (shared by the loops)

  // The connection to `address` for `lane` (0 .. upstream_connections-1), connecting if there
  // is none. Null when the socket fails.
  WorkerConnection* Worker(const std::string& address, uint32_t lane);
  void AddConnection(std::unique_ptr<H2Connection> c);
  // Deletes `c` at the end of the iteration.
  void Release(H2Connection* c);
};

// Counts gRPC messages in a byte stream (5-byte prefix: flag, big-endian length).
class MessageCounter {
 public:
  void Feed(const uint8_t* data, size_t len);
  int64_t messages() const { return messages_; }

 private:
  int header_left_ = 5;
  uint64_t body_left_ = 0;
  uint32_t length_ = 0;
  int64_t messages_ = 0;
};

class ClientCall;

// The client side of a relayed call: an HTTP/2 stream of a ClientConnection, or a request of
// an HTTP/1.1 connection (the OpenAI front). The call says when its response starts and when
// more of it can be taken (ClientCall::TakeResponse); the client side writes it in its own
// protocol. All on the loop's thread.
class CallClient {
 public:
  virtual ~CallClient() = default;
  // The worker connection lane the call uses (spreads clients over worker connections).
  virtual uint32_t lane() const = 0;
  // The response starts: the worker's headers (null: none, a plain gRPC 200).
  virtual void StartResponse(const Headers* headers) = 0;
  // Response bytes, or the end, can be taken.
  virtual void ResponseReady() = 0;
  // The call ended with nothing sent: a trailers-only response.
  virtual void TrailersOnly(const Headers& trailers) = 0;
  // The call lets go of this client (the client's stream closed; no call follows).
  virtual void Detach(ClientCall* call) = 0;
};

class ClientCall {
 public:
  // `client` must stay valid until OnClientClosed.
  ClientCall(LoopContext* ctx, CallClient* client);

  // From the client's session.
  void AddHeader(std::string_view name, std::string_view value);
  void OnRequestHeaders();
  void OnRequestData(const uint8_t* data, size_t len);
  void OnRequestEnd();
  // The client stream closed (after our END_STREAM, a reset, or the connection closing).
  void OnClientClosed(uint32_t error_code);
  // Takes up to `length` response bytes into `buf`. 0 with `*ended` false: nothing now
  // (ResponseReady follows); 0 with `*ended` true: all sent, final_trailers() remain.
  size_t TakeResponse(uint8_t* buf, size_t length, bool* ended);
  const Headers& final_trailers() const { return final_trailers_; }

  // From the attempt in progress.
  void OnWorkerHeaders(const Headers& headers);
  void OnWorkerData(const uint8_t* data, size_t len);
  // The attempt ended: its gRPC status (from its trailers, or made up for a transport failure)
  // and trailers to pass on.
  // `worker_fault` false: the worker refused the stream unprocessed (GOAWAY, REFUSED_STREAM);
  // retried like a failure but not counted toward its ejection.
  void OnWorkerClosed(int code, const std::string& message, const Headers& trailers,
                      bool worker_fault = true);

  // The request as the worker stream's data provider reads it.
  const std::string& request() const { return request_; }
  bool request_done() const { return request_done_; }
  const std::string& path() const { return path_; }
  // Headers to send to the worker (no pseudo-headers; grpc-timeout recomputed).
  Headers WorkerHeaders() const;

 private:
  void StartAttempt();
  // How an attempt ended: retries, or settles the call's status.
  // `worker_fault` false: a local failure (no socket, no stream id) or a refused stream, which
  // never counts against the worker.
  void AttemptEnded(int code, const std::string& message, const Headers& trailers,
                    bool worker_fault = true);
  void Commit(const Headers* headers);
  void Finish(int code, const std::string& message, const Headers& trailers);
  void ResumeResponse();
  void OnDeadline();
  void MaybeDelete();
  void CallDone(int code);
  // Takes the call out of the in-flight count (once), when it is deleted: its answer is out and
  // its stream closed (an early status resets a stream the client keeps open: OnFrameSend).
  void LeaveInFlight();
  ~ClientCall();

  // Where the call stands with its client; it only moves forward.
  enum class Phase {
    kOpen,       // the request is arriving, or attempts run: nothing sent, retries allowed
    kCommitted,  // response headers went to the client: no more retries
    kFinished,   // the final status is known (trailers queued behind the response bytes)
  };
  // Why the call ended before the worker ended it, if it did.
  enum class EndCause { kNone, kClientCancelled, kDeadline };

  bool committed() const { return phase_ == Phase::kCommitted; }
  bool finished() const { return phase_ == Phase::kFinished; }

  LoopContext* ctx_;
  CallClient* client_;          // null once the client's side closed (client_closed_)
  bool client_closed_ = false;  // the client's stream closed: nobody to answer
  Phase phase_ = Phase::kOpen;
  EndCause end_cause_ = EndCause::kNone;
  Clock::time_point arrival_;

  // Request.
  std::string path_;
  Headers metadata_;           // non-pseudo request headers, forwarded
  std::string authorization_;  // checked here, never forwarded
  std::optional<Clock::time_point> deadline_;
  uint64_t deadline_timer_ = 0;
  std::string request_;
  bool request_done_ = false;
  bool to_workers_ = false;  // llm.v1.Generation: picked worker, retries; else pass-through
  bool entered_ = false;

  // The prompt's prefix chain (PrefixIndex::Chain) for cache-aware picks; computed once.
  void ComputePrefix();
  std::vector<uint64_t> prefix_;
  std::string model_;         // the model the request names (Generate), for the pick
  std::string served_model_;  // the picked worker's model.name, for the metrics' label
  bool prefix_done_ = false;

  // Attempts.
  WorkerAttempt* attempt_ = nullptr;
  std::shared_ptr<WorkerHandle> worker_;
  std::vector<const WorkerHandle*> tried_;
  std::vector<std::shared_ptr<WorkerHandle>> tried_handles_;
  int attempts_ = 0;
  std::string last_failure_;
  // A full worker's refusal (RESOURCE_EXHAUSTED with its retry hint) that sent the call to
  // another worker: what the client gets when no other worker can take it.
  struct Refusal {
    int code;
    std::string message;
    Headers trailers;
  };
  std::optional<Refusal> refusal_;
  bool got_data_ = false;       // the current attempt sent response bytes
  bool retry_pending_ = false;  // a timer will start the next attempt (keeps the call alive)
  Headers worker_headers_;

  // Response.
  std::string pending_;  // response bytes not yet taken by the client side
  size_t pending_offset_ = 0;
  Headers final_trailers_;
  int final_code_ = 0;
  MessageCounter counter_;
};

class ClientConnection final : public H2Connection {
 public:
  // `ssl`: owned; null for plaintext.
  ClientConnection(LoopContext* ctx, int fd, SSL* ssl);
  ~ClientConnection() override;
  LoopContext* ctx() const { return ctx_; }
  uint32_t lane() const { return lane_; }
  void StartDrain() override;

  // One client stream as a call's client side.
  class Stream;

 protected:
  void OnClose(const std::string& why) override;

 private:
  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame*, void*);
  static int OnHeader(nghttp2_session*, const nghttp2_frame*, const uint8_t*, size_t,
                      const uint8_t*, size_t, uint8_t, void*);
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame*, void*);
  static int OnDataChunk(nghttp2_session*, uint8_t, int32_t, const uint8_t*, size_t, void*);
  static int OnStreamClose(nghttp2_session*, int32_t, uint32_t, void*);
  // After the final HEADERS (the status) of a stream whose request is still open: RST_STREAM
  // NO_ERROR (RFC 9113 8.1), so a client that never half-closes does not hold the stream.
  static int OnFrameSend(nghttp2_session*, const nghttp2_frame*, void*);

  LoopContext* ctx_;
  uint32_t lane_;
  std::map<ClientCall*, std::unique_ptr<Stream>> streams_;
};

class WorkerAttempt {
 public:
  WorkerAttempt(WorkerConnection* conn, ClientCall* call) : conn_(conn), call_(call) {}
  int32_t stream_id = -1;
  WorkerConnection* conn_;
  ClientCall* call_;
  Headers response_headers, trailers;
  std::optional<int> grpc_status;
  std::string grpc_message;
  int http_status = 0;
  bool cancelled = false;
  size_t request_offset = 0;

  // Credits `n` response bytes back to the worker (they left for the client).
  void Consume(size_t n);
  void Cancel();
  // The client's request data grew or ended (pass-through calls).
  void ResumeRequest();
};

class WorkerConnection final : public H2Connection {
 public:
  // Connects to `address` ("host:port") and registers it under `key` in ctx->workers; null
  // when no socket could be made.
  static WorkerConnection* Connect(LoopContext* ctx, const std::string& address,
                                   const std::string& key);
  const std::string& address() const { return address_; }
  bool draining() const { return draining_; }
  // Starts an attempt of `call`; null when this connection cannot take it.
  WorkerAttempt* Submit(ClientCall* call);

 protected:
  void OnClose(const std::string& why) override;

 private:
  WorkerConnection(LoopContext* ctx, int fd, SSL* ssl, std::string address, std::string key);
  ~WorkerConnection() override;
  // Timers: the connect deadline, and the keepalive check (PING when idle, close when the
  // PING goes unanswered).
  void OnConnectDeadline();
  void OnKeepalive();
  void CancelTimers();
  static int OnHeader(nghttp2_session*, const nghttp2_frame*, const uint8_t*, size_t,
                      const uint8_t*, size_t, uint8_t, void*);
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame*, void*);
  static int OnDataChunk(nghttp2_session*, uint8_t, int32_t, const uint8_t*, size_t, void*);
  static int OnStreamClose(nghttp2_session*, int32_t, uint32_t, void*);
  void StopTaking();

  LoopContext* ctx_;
  std::string address_;
  std::string key_;
  bool draining_ = false;
  uint64_t connect_timer_ = 0;
  uint64_t keepalive_timer_ = 0;
  std::optional<Clock::time_point> ping_sent_;
  std::set<WorkerAttempt*> streams_;
};

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_RELAY_INTERNAL_H_
