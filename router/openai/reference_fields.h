// The fields of today's OpenAI chat and completions references beyond what the body's own
// translator reads, each with its rule (docs/router.md, "Fields"):
//   logit_bias          applied (SamplingParams.logit_bias; the CPU backend)
//   reasoning_effort    passed to the chat template as reasoning_effort (unless
//                       chat_template_kwargs has it)
//   prompt_cache_key    a routing hint (GenerateRequest.prompt_cache_key)
//   modalities, audio   text only: ["text"] and a null audio pass, audio output is a 400
//   service_tier, verbosity, safety_identifier, prediction, web_search_options
//                       checked for their type, then ignored (one tier, no verbosity control,
//                       no safety system, no predicted-output path, no search tool)
// An ignored field is logged once per process, the first time a request carries it, as is an
// unknown field when unknown fields are ignored (router.unknown_fields: ignore; the first 64
// names).
#ifndef LLM_ROUTER_OPENAI_REFERENCE_FIELDS_H_
#define LLM_ROUTER_OPENAI_REFERENCE_FIELDS_H_

#include <string>

#include "absl/status/status.h"
#include "llm/v1/generation.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/openai_api.h"

namespace llm::router::openai {

// Whether `key` is one of the fields above for `kind` (chat has them all; completions only
// logit_bias, which the completions reference has too).
bool IsReferenceField(ApiKind kind, const std::string& key);

// Checks and applies the fields above present in `body` to `r`; a bad one is a 400 naming it.
absl::Status ParseReferenceFields(const nlohmann::ordered_json& body, ApiKind kind,
                                  llm::v1::GenerateRequest& r, ApiError* e);

// Logs, once per process and name, that `key` was ignored and why (bounded to 64 names).
void LogIgnoredOnce(const std::string& key, const std::string& why);

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_REFERENCE_FIELDS_H_
