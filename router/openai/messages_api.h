// Anthropic's Messages API (POST /v1/messages and /v1/messages/count_tokens), served over the
// chat path (pure logic: no socket, no gRPC call). docs/router.md, "Anthropic's Messages API".
//
//   ParseMessagesRequest  a /v1/messages body -> ParsedRequest (kind kMessages) whose
//                         GenerateRequest is the chat the body's `system` and `messages` make:
//                         text blocks, tool_use blocks (the assistant's tool calls) and
//                         tool_result blocks (tool messages); `tools` with `input_schema`,
//                         `tool_choice` (auto, any, tool, none), `output_config.format`
//                         (a JSON Schema), `stop_sequences`, `thinking` (the template's
//                         enable_thinking). A 400 names the field as the API does
//                         (`messages[1].content[0].type`, `stop_sequences`).
//   MessagesResponder     GenerateResponse messages -> the Message object, or its SSE events
//                         (message_start ... message_stop).
//   MessagesErrorBody     an error as the API writes it: {"type": "error", "error": {"type",
//                         "message"}}, its type from the HTTP status.
//   CountTokensBody       /v1/messages/count_tokens' answer, from the chat's tokenization.
//
// What has no counterpart here is refused by name: image, document and server-tool blocks,
// server tools (web search, code execution), `mcp_servers`, `container`. A final assistant
// message (a prefill) is continued, not answered (Chat.continue_final_message).
// `cache_control` is accepted and ignored: the prefix cache reuses every repeated prefix.
#ifndef LLM_ROUTER_OPENAI_MESSAGES_API_H_
#define LLM_ROUTER_OPENAI_MESSAGES_API_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "llm/v1/generation.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/openai_api.h"

namespace llm::router::openai {

// Parses a /v1/messages body; with `count_tokens`, a /v1/messages/count_tokens body (no
// max_tokens, no stream). Errors are 400 with the message naming the field.
absl::StatusOr<ParsedRequest> ParseMessagesRequest(std::string_view body, ApiError* error,
                                                   const ParseOptions& options = {},
                                                   bool count_tokens = false);

// An error message of the chat path (the chat parser's, or the worker's) with the chat
// parameters renamed as this API names them: max_completion_tokens -> max_tokens, stop ->
// stop_sequences, response_format -> output_config.format.
std::string MessagesErrorText(const std::string& chat_message);

// {"type": "error", "error": {"type", "message"}}: invalid_request_error (400, 413:
// request_too_large), authentication_error (401), permission_error (403), not_found_error
// (404), rate_limit_error (429), overloaded_error (503), timeout_error (504), api_error (the
// rest).
std::string MessagesErrorBody(const ApiError& e);

// {"input_tokens": the prompt's tokens}.
std::string CountTokensBody(const llm::v1::TokenizeResponse& response);

// Builds the Message of one call (one choice: the API has no n). Content blocks in the order
// the model wrote them: "thinking" for its reasoning (signature empty: nothing signs it),
// "text" for text, "tool_use" for each tool call (its arguments parsed into `input`). stop_reason:
// end_turn, stop_sequence (with the string), tool_use, max_tokens, or model_context_window_exceeded
// (the context ended it before max_tokens). Usage as the API counts it: input_tokens are the
// prompt's tokens not read from the prefix cache, cache_read_input_tokens the rest.
class MessagesResponder final : public Responder {
 public:
  // `id` "msg_...".
  MessagesResponder(const ParsedRequest& request, std::string id);

  // Streaming: "event: TYPE\ndata: {...}\n\n". message_start on the first message (with the
  // prompt's usage: the request asks the worker for usage on every message);
  // content_block_start / _delta (text_delta, input_json_delta) / _stop per block;
  // StreamEnd: message_delta (stop_reason, usage), message_stop. StreamError: an error event.
  std::string OnStreamMessage(const llm::v1::GenerateResponse& m) override;
  int UnfinishedChoices() const override;
  std::string StreamEnd() override;
  std::string StreamError(const ApiError& e) override;
  void Accumulate(const llm::v1::GenerateResponse& m) override;
  std::string Body() const override;

 private:
  // One content block: text, thinking, or a tool call (its arguments' text so far).
  struct Block {
    bool tool = false;
    bool thinking = false;  // the model's reasoning (GenerateResponse.reasoning_text)
    bool open = true;
    std::string text;  // text; tool: the arguments' JSON text
    std::string id, name;
  };

  // Applies `m`; with stream_ set, appends its events to `out`.
  void Apply(const llm::v1::GenerateResponse& m, std::string& out);
  void ApplyCall(const llm::v1::ToolCall& c, std::string& out);
  // Appends text (or thinking) to the last block if it is an open one of that kind, else to a
  // new one.
  void ApplyText(const std::string& text, bool thinking, std::string& out);
  void CloseLast(std::string& out);
  void Emit(const std::string& type, nlohmann::ordered_json event, std::string& out);
  void Start(std::string& out);  // message_start, once
  nlohmann::ordered_json BlockJson(const Block& b) const;
  nlohmann::ordered_json UsageJson() const;
  nlohmann::ordered_json MessageJson(bool started) const;
  std::string StopReason() const;

  std::string model_;
  std::string id_;
  uint32_t max_tokens_;  // the request's (0: the server's default)
  bool warm_only_;       // max_tokens 0: the one token computed is no part of the answer
  bool thinking_;        // thinking blocks asked for (ParsedRequest::show_reasoning)
  bool stream_ = false;
  bool started_ = false;
  std::vector<Block> blocks_;
  llm::v1::FinishReason finish_ = llm::v1::FINISH_REASON_UNSPECIFIED;
  std::string stop_sequence_;
  llm::v1::Usage usage_;
};

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_MESSAGES_API_H_
