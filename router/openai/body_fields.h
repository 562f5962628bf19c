// Reading a request body's fields for the OpenAI front: each present field checked before it
// is read, a bad one a 400 (ApiError) naming it. Shared by the body's translators.
#ifndef LLM_ROUTER_OPENAI_BODY_FIELDS_H_
#define LLM_ROUTER_OPENAI_BODY_FIELDS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/openai/openai_api.h"

namespace llm::router::openai {

// Fills `e` as a 400 naming `param`; returns INVALID_ARGUMENT with the message.
absl::Status Bad(ApiError* e, std::string param, std::string message);
// The field is there and not null.
bool Present(const nlohmann::ordered_json& body, const char* key);
// `j` is the string `text` (comparing json with a literal trips GCC 12's array-bounds warning).
bool Is(const nlohmann::ordered_json& j, std::string_view text);
// An integer field in [lo, hi]: false when absent or null.
absl::StatusOr<bool> Int(const nlohmann::ordered_json& body, const char* key, int64_t lo,
                         int64_t hi, int64_t* out, ApiError* e);
absl::StatusOr<bool> Number(const nlohmann::ordered_json& body, const char* key, double* out,
                            ApiError* e);
absl::StatusOr<bool> Bool(const nlohmann::ordered_json& body, const char* key, bool* out,
                          ApiError* e);
// Every top-level field of `body` is `known` (else a 400 naming it; with
// options.ignore_unknown_fields it is logged once and erased) and nests at most
// kMaxJsonNesting levels deep, checked before anything walks it recursively.
absl::Status CheckFields(nlohmann::ordered_json& body,
                         const std::function<bool(const std::string&)>& known,
                         const ParseOptions& options, ApiError* e);

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_BODY_FIELDS_H_
