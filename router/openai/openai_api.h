// The OpenAI HTTP API's request and response bodies, translated to and from llm.v1 (pure logic:
// no socket, no gRPC call).
//
//   ParseOpenAiRequest   a /v1/chat/completions or /v1/completions JSON body -> GenerateRequest,
//                        or a 400 naming the parameter. Parameters we cannot honour (best_of,
//                        functions, ...) are refused, never ignored. Structured
//                        output's parameters: structured_params.h; tools: tool_params.h.
//   Responder            GenerateResponse messages -> the API's answer: SSE events (stream) or
//                        one JSON object. OpenAiResponder answers chat and completions
//                        (openai_responder.cc); the Responses API's: responses_api.h;
//                        Anthropic's Messages API's: messages_api.h.
//   OpenAiError          an error body {"error": {"message", "type", "param", "code"}}.
#ifndef LLM_ROUTER_OPENAI_OPENAI_API_H_
#define LLM_ROUTER_OPENAI_OPENAI_API_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "llm/v1/generation.pb.h"
#include "nlohmann/json.hpp"

namespace llm::router::openai {

// kResponses: POST /v1/responses (responses_api.h); kMessages: Anthropic's POST /v1/messages
// (messages_api.h). Both are sent to the worker in the chat form.
enum class ApiKind { kChat, kCompletion, kResponses, kMessages };

// An HTTP error: status, and the OpenAI error object's fields.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;           // empty: null
  std::string code;            // empty: null
  int64_t retry_after_ms = 0;  // 429: the Retry-After header (seconds, rounded up)
};
std::string OpenAiErrorBody(const ApiError& e);

struct ParsedRequest {
  ApiKind kind = ApiKind::kChat;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // stream_options.continuous_usage_stats (vLLM's; with include_usage): every chunk carries its
  // choice's usage so far.
  bool continuous_usage = false;
  // return_token_ids (vLLM's): the prompt's and each choice's token ids in the answer.
  bool return_token_ids = false;
  // Completions' echo: each choice's text starts with its prompt (and with logprobs, its
  // logprobs with the prompt tokens'): a text prompt as sent, token ids as the worker's
  // prompt_logprobs write them. prompt_texts: each prompt's text, empty for token ids.
  bool echo = false;
  std::vector<std::string> prompt_texts;
  // echo with max_tokens 0 (and the Messages API's max_tokens 0, a prompt-cache warm-up): the
  // one token the worker computes is not part of the answer (no text, logprobs or ids of it;
  // 0 completion tokens).
  bool echo_only = false;
  // vLLM's prompt_logprobs: -1 none; n: each choice's (a chat's, once) prompt_logprobs list.
  int prompt_logprobs = -1;
  int n = 1;              // choices (GenerateRequest.n) of each prompt
  int prompts = 1;        // completions: prompts (1 + GenerateRequest.more_prompts)
  bool logprobs = false;  // report logprobs
  int top_logprobs = 0;   // alternatives to report per token
  llm::v1::GenerateRequest request;
  // The model's reasoning (GenerateResponse.reasoning_text) is part of the answer; kMessages:
  // only with `thinking` enabled, as the API answers thinking blocks.
  bool show_reasoning = true;
  // kResponses: the request's parameters its Response object repeats (instructions, tools,
  // tool_choice, text, temperature, ...), in the API's own shape.
  nlohmann::ordered_json response_params;
};

struct ParseOptions {
  // A field no OpenAI reference has is logged once and ignored rather than a 400
  // (router.unknown_fields: ignore).
  bool ignore_unknown_fields = false;
};

// Parses a request body of `kind` (kResponses: ParseResponsesRequest; kMessages:
// ParseMessagesRequest). Errors are 400 with
// `param` naming the field. The fields of the OpenAI references it implements or ignores, and
// why: reference_fields.h.
absl::StatusOr<ParsedRequest> ParseOpenAiRequest(ApiKind kind, std::string_view body,
                                                 ApiError* error, const ParseOptions& options = {});

// The error a gRPC status becomes: INVALID_ARGUMENT 400 (param from the message's field name),
// NOT_FOUND 404 (model_not_found for "model: ..."), UNAUTHENTICATED 401, RESOURCE_EXHAUSTED 429
// (retry_after_ms from the pushback), UNAVAILABLE 503, DEADLINE_EXCEEDED 504, CANCELLED 499,
// anything else 500.
ApiError ErrorFromGrpc(int code, const std::string& message, int64_t pushback_ms);

// The answer to one call, built from its GenerateResponse messages as they arrive: a stream of
// SSE events, or (Accumulate, then Body) one JSON object.
class Responder {
 public:
  virtual ~Responder() = default;
  // Streaming: the SSE events this message produces (possibly none, possibly several).
  virtual std::string OnStreamMessage(const llm::v1::GenerateResponse& m) = 0;
  // Choices without a finish reason yet: after a call that ended OK, choices the worker never
  // answered (one older than the router, which ignored n or more prompts).
  virtual int UnfinishedChoices() const = 0;
  // Streaming: the final events after the last message.
  virtual std::string StreamEnd() = 0;
  // Streaming: an error after the stream started, as the API's last events.
  virtual std::string StreamError(const ApiError& e) = 0;
  // Non-streaming: accumulates `m`.
  virtual void Accumulate(const llm::v1::GenerateResponse& m) = 0;
  // Non-streaming: the whole response body.
  virtual std::string Body() const = 0;
  // After a call that ended OK: what the request asked for that the worker did not send (a
  // worker older than the router); empty: nothing.
  virtual std::string MissingFromWorker() const { return ""; }
};

// The responder of `request`'s API. `id` e.g. "chatcmpl-...", "resp_..."; `created` in Unix
// seconds.
std::unique_ptr<Responder> MakeResponder(const ParsedRequest& request, std::string id,
                                         int64_t created);

// Builds the response of one request from its GenerateResponse messages, one choice per
// GenerateResponse.index (n > 1 or several prompts: their messages interleave; prompt p's
// choices are p * n to p * n + n - 1). Usage counts each prompt once: its prompt tokens and,
// of those, the most any of its choices took from the prefix cache, and every choice's
// completion tokens.
class OpenAiResponder final : public Responder {
 public:
  // `id` e.g. "chatcmpl-..."; `created` in Unix seconds.
  OpenAiResponder(const ParsedRequest& request, std::string id, int64_t created);

  // Streaming: "data: {...}\n\n" chunks; StreamEnd adds the usage chunk when asked, then
  // [DONE]; StreamError is an error event, then [DONE].
  std::string OnStreamMessage(const llm::v1::GenerateResponse& m) override;
  int UnfinishedChoices() const override;
  std::string StreamEnd() override;
  std::string StreamError(const ApiError& e) override;
  void Accumulate(const llm::v1::GenerateResponse& m) override;
  std::string Body() const override;
  std::string MissingFromWorker() const override;

 private:
  // One choice's state.
  struct Choice {
    bool role_sent = false;
    bool echoed = false;               // echo: the prompt came first
    bool echo_missing = false;         // echo: the worker sent no prompt entries it needed
    nlohmann::ordered_json prompt_lp;  // vLLM's prompt_logprobs (null until they come)
    size_t text_offset = 0;            // completions' text_offset of the next logprob entry
    std::string text;
    std::string reasoning;  // chat: the model's thinking (GenerateResponse.reasoning_text)
    nlohmann::ordered_json logprob_entries = nlohmann::ordered_json::array();  // chat: content
    nlohmann::ordered_json tokens = nlohmann::ordered_json::array(),
                           token_logprobs = nlohmann::ordered_json::array(),
                           top = nlohmann::ordered_json::array(),
                           offsets = nlohmann::ordered_json::array();
    nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();  // message.tool_calls
    // return_token_ids: the prompt's ids (the choice's first message has them) and the output's.
    nlohmann::ordered_json prompt_ids = nlohmann::ordered_json::array(),
                           token_ids = nlohmann::ordered_json::array();
    std::string finish_reason;
    llm::v1::Usage usage;
  };

  // The choice `m` belongs to (null for an index past the request's n: a worker's bug).
  Choice* ChoiceOf(const llm::v1::GenerateResponse& m);
  nlohmann::ordered_json Chunk() const;
  nlohmann::ordered_json LogprobsJson(const llm::v1::GenerateResponse& m, Choice& c) const;
  // A completion's logprobs object of `entries` (text_offset continuing c's); with
  // first_has_none the first entry's logprob and alternatives are null (a prompt's first token).
  nlohmann::ordered_json CompletionLogprobs(
      const google::protobuf::RepeatedPtrField<llm::v1::TokenLogprobs>& entries, Choice& c,
      bool first_has_none) const;
  // Appends a logprobs object (LogprobsJson's) to c's.
  void AppendLogprobs(const nlohmann::ordered_json& lp, Choice& c) const;
  // The text `m`'s choice's prompt was sent as; null for token ids.
  const std::string* PromptText(const llm::v1::GenerateResponse& m) const;
  // echo: the prompt of `m`'s choice (as sent, or as the worker's prompt entries write it).
  std::string EchoText(const llm::v1::GenerateResponse& m) const;
  // echo, on the choice's first message: {"text", "logprobs"} of the prompt, into c.
  nlohmann::ordered_json Echo(const llm::v1::GenerateResponse& m, Choice& c);
  nlohmann::ordered_json UsageJson() const;
  // A streamed chunk's "usage": null, or with continuous_usage the choice's usage so far.
  nlohmann::ordered_json ChunkUsage(const Choice& c) const;
  // Streaming with return_token_ids: `m`'s token ids (and prompt ids) into a chunk's `choice`.
  void AddTokenIds(const llm::v1::GenerateResponse& m, nlohmann::ordered_json& choice) const;
  std::string OnStreamChat(const llm::v1::GenerateResponse& m, Choice& c,
                           const std::string& finish);

  ApiKind kind_;
  std::string model_;
  bool include_usage_;
  bool continuous_usage_;
  bool return_token_ids_;
  bool echo_;
  bool echo_only_;
  int prompt_logprobs_;
  std::vector<std::string> prompt_texts_;
  bool logprobs_;
  int top_logprobs_;
  int n_;  // choices per prompt
  std::string id_;
  int64_t created_;
  std::vector<Choice> choices_;  // by index
};

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_OPENAI_API_H_
