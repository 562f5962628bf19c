// The HTTP front's /tokenize and /detokenize bodies (vLLM's shapes), translated to and from
// llm.v1 (pure logic: no socket, no gRPC call).
//
//   POST /tokenize    {"model"?, "prompt", "add_special_tokens"?}
//                  or {"model"?, "messages", "add_generation_prompt"?, "chat_template_kwargs"?,
//                      "tools"?, "add_special_tokens"?}
//                     -> {"count", "max_model_len", "tokens": [...]}
//   POST /detokenize  {"model"?, "tokens": [...]} -> {"prompt"}
//
// The "messages" form (vLLM's) is a chat as /v1/chat/completions takes it (chat_params.h),
// rendered by the worker's chat template: the prompt's tokens a chat request would have.
// add_special_tokens defaults to true for a prompt and false for a chat (the template writes
// them), as vLLM's do. A missing model is the only model's (a router with several refuses it,
// as for Generate). Errors are 400 naming the field; fields of neither shape are refused too
// unless ParseOptions::ignore_unknown_fields.
#ifndef LLM_ROUTER_OPENAI_TOKENIZE_API_H_
#define LLM_ROUTER_OPENAI_TOKENIZE_API_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "llm/v1/generation.pb.h"
#include "router/openai/openai_api.h"

namespace llm::router::openai {

absl::StatusOr<llm::v1::TokenizeRequest> ParseTokenizeBody(std::string_view body, ApiError* error,
                                                           const ParseOptions& options = {});
absl::StatusOr<llm::v1::DetokenizeRequest> ParseDetokenizeBody(std::string_view body,
                                                               ApiError* error,
                                                               const ParseOptions& options = {});

std::string TokenizeResponseBody(const llm::v1::TokenizeResponse& response);
std::string DetokenizeResponseBody(const llm::v1::DetokenizeResponse& response);

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_TOKENIZE_API_H_
