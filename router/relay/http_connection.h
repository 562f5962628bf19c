// One HTTP/1.1 connection of the OpenAI-compatible front (router.http_listen), on a relay loop
// like the HTTP/2 client connections (internal to router/relay).
//
//   POST /v1/chat/completions, POST /v1/completions,
//   POST /v1/responses                                 streaming (SSE) or one JSON object
//   POST /v1/messages                                  Anthropic's Messages API, as above
//   POST /v1/messages/count_tokens                     {"input_tokens"}
//   GET  /v1/models                                    the models the healthy workers report
//                                                      (Anthropic's shape with anthropic-version)
//   GET  /health                                       200 while serving, 503 while draining
//
// Requests are parsed with http-parser (keep-alive, pipelined requests answered in order by
// one loop, a body over the limit answered 413 before it is read, Expect: 100-continue, HEAD). A
// completion request becomes an llm.v1 GenerateRequest (router/openai) and a ClientCall call whose
// client side is this connection: the pick, retries before the first token, ejection, deadlines,
// the bearer token and metrics are the gRPC path's own code. Slow and idle clients are closed
// (HttpLimits: a request must arrive within the read timeout of its first byte, a new
// connection's first request within it of the accept; a keep-alive connection may idle for
// the idle timeout); no timeout runs while a request is answered. The worker's gRPC response bytes
// are taken from the call at the end of each loop iteration, parsed and written as JSON or SSE;
// taking stops while more than 1 MiB waits for a slow client (which slows only its own worker
// stream). A client that closes its connection cancels its call at the worker.
#ifndef LLM_ROUTER_RELAY_HTTP_CONNECTION_H_
#define LLM_ROUTER_RELAY_HTTP_CONNECTION_H_

#include <http_parser.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "router/openai/openai_api.h"
#include "router/relay/relay_internal.h"
#include "router/relay/tls_pipe.h"

namespace llm::router::relay {

class HttpConnection final : public FdHandler, public CallClient {
 public:
  // Takes `fd` (connected, non-blocking) and `ssl` (null: plaintext; else HTTPS with the
  // gRPC port's certificate, tls.*) and starts watching the socket. `client`: the peer's
  // address, counted by ctx->http_gate (released when the connection is deleted).
  HttpConnection(LoopContext* ctx, int fd, SSL* ssl, std::string client);
  ~HttpConnection() override;

  void OnEvents(uint32_t events) override;
  // End of the loop iteration: takes what the call has, then writes.
  void Flush() override;
  // Closes the socket; a call in progress is cancelled. Deleted at the end of the iteration.
  void Close();

  // CallClient.
  uint32_t lane() const override { return lane_; }
  void StartResponse(const Headers* headers) override;
  void ResponseReady() override;
  void TrailersOnly(const Headers& trailers) override;
  void Detach(ClientCall* call) override;

 private:
  static const http_parser_settings& Settings();
  void ReadAll();
  // Bytes read from the socket, decrypted when TLS is on.
  void Received(const char* data, size_t n);
  // Parses pending_in_, answering complete requests in order, until one starts a call (the
  // rest waits for its answer) or the connection is to close.
  void ParsePending();
  void HeaderDone();
  void Handle();
  void StartCall(openai::ParsedRequest request);
  // A unary call (Tokenize, Detokenize) of `path` with `message`, answered as JSON at its end.
  void StartUnary(const char* path, const std::string& message);
  void SendToWorkers(const char* path, const std::string& message);
  // x-api-key as the bearer token where Authorization is absent or does not match.
  void TakeApiKey();
  // Takes the client's X-Request-Id for the answer; false: it is malformed and was answered
  // with a 400 naming it.
  bool AcceptRequestId();
  // POST /tokenize or /detokenize (router/openai/tokenize_api.h), sent to a worker of its model.
  void HandleTokenize(bool tokenize);
  // POST /v1/messages/count_tokens (router/openai/messages_api.h): the chat's Tokenize.
  void HandleCountTokens();
  // GET /v1/models: every name (and alias) the healthy workers report, once. GET
  // /v1/models/{name} (`name` percent-decoded, slashes and all): that model's object, or a 404
  // model_not_found.
  void ListModels(std::string_view name);
  // Takes the call's response bytes and, at its end, its status.
  void Pump();
  void OnMessage(const std::string& bytes);
  void EndCall(const Headers& trailers);
  void RequestDone();

  // The timeout of the state the connection is in: reading a request, or idle between them.
  void ArmTimeout(bool idle);
  void DisarmTimeout();

  void Write(std::string_view bytes);
  void WriteChunk(std::string_view bytes);
  void Respond(int status, std::string_view body, const std::vector<std::string>& extra = {});
  void RespondError(const openai::ApiError& e);
  void StartStream();

  LoopContext* ctx_;
  int fd_;
  std::string client_;
  uint32_t lane_;
  uint64_t timer_ = 0;       // the armed timeout's, 0: none
  bool timer_idle_ = false;  // it is the idle timeout
  http_parser parser_;
  // The request being parsed.
  std::string url_, body_, authorization_, field_, value_;
  std::string request_id_;  // X-Request-Id as the client sent it
  // Anthropic's headers: x-api-key (the bearer token where Authorization is absent), and
  // anthropic-version (its presence: errors and /v1/models in Anthropic's shapes).
  std::string api_key_, anthropic_version_;
  bool anthropic_ = false;  // the request is Anthropic's: errors in its shape
  // The answer's X-Request-Id: the client's, or a call's own id (GenerateRequest.request_id).
  std::string reply_id_;
  bool too_large_ = false;
  bool expect_continue_ = false;  // Expect: 100-continue
  bool head_request_ = false;     // HEAD: answered without a body
  bool in_request_ = false;       // a complete request is being answered
  bool parsing_ = false;          // inside ParsePending
  bool keep_alive_ = true;
  bool chunked_ = true;     // HTTP/1.1: streams use chunked transfer encoding
  std::string pending_in_;  // bytes read, not yet parsed (pipelined: once the answer is out)
  // The call in progress.
  ClientCall* call_ = nullptr;
  std::optional<openai::ParsedRequest> request_;
  std::unique_ptr<openai::Responder> responder_;
  // A unary call in progress (request_ unset): its path, and its response message.
  const char* unary_path_ = nullptr;
  std::string unary_reply_;
  bool count_tokens_ = false;  // the Tokenize call answers /v1/messages/count_tokens
  bool stream_started_ = false;
  std::string grpc_in_;  // gRPC-framed response bytes not yet parsed
  std::optional<Headers> trailers_only_;
  // Output: out_ (the protocol's bytes), then with TLS wire_ (the records to send).
  std::unique_ptr<TlsPipe> tls_;
  std::string out_;
  size_t out_offset_ = 0;
  std::string wire_;
  size_t wire_offset_ = 0;
  bool want_out_ = false;
  bool close_when_written_ = false;
  bool closed_ = false;
};

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_HTTP_CONNECTION_H_
