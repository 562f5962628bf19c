#include "router/openai/tokenize_api.h"

#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "nlohmann/json.hpp"
#include "router/openai/body_fields.h"
#include "router/openai/chat_params.h"

namespace llm::router::openai {
namespace {

using json = nlohmann::ordered_json;

// The body as a JSON object whose fields are all in `known` (others: a 400 naming the first,
// or ignored with options.ignore_unknown_fields), each nesting within bounds before anything
// walks it recursively (dump, the worker's template values), as the completion APIs check.
absl::StatusOr<json> ParseObject(std::string_view text, const std::set<std::string>& known,
                                 const ParseOptions& options, ApiError* e) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Bad(e, "", "the request body is not valid JSON");
  if (!body.is_object()) return Bad(e, "", "the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!known.count(key)) {
      if (!options.ignore_unknown_fields) {
        return Bad(e, key, absl::StrCat("unknown parameter '", key, "'"));
      }
      continue;  // ignored, never walked
    }
    if (JsonNestsDeeperThan(value, kMaxJsonNesting - 1)) {
      return Bad(e, key,
                 absl::StrCat("'", key, "' nests deeper than ", kMaxJsonNesting, " levels"));
    }
  }
  return body;
}

// The optional "model" field, a string.
absl::StatusOr<std::string> Model(const json& body, ApiError* e) {
  if (!Present(body, "model")) return std::string();
  if (!body["model"].is_string()) return Bad(e, "model", "'model' must be a string");
  return body["model"].get<std::string>();
}

}  // namespace

absl::StatusOr<llm::v1::TokenizeRequest> ParseTokenizeBody(std::string_view text, ApiError* e,
                                                           const ParseOptions& options) {
  auto body =
      ParseObject(text,
                  {"model", "prompt", "add_special_tokens", "messages", "add_generation_prompt",
                   "continue_final_message", "chat_template_kwargs", "tools"},
                  options, e);
  if (!body.ok()) return body.status();
  llm::v1::TokenizeRequest r;
  auto model = Model(*body, e);
  if (!model.ok()) return model.status();
  r.set_model(*model);
  if (Present(*body, "messages")) {
    if (Present(*body, "prompt")) return Bad(e, "prompt", "give 'prompt' or 'messages', not both");
    if (absl::Status st = ParseChat(*body, *r.mutable_chat(), e); !st.ok()) return st;
  } else if (!Present(*body, "prompt") || !(*body)["prompt"].is_string()) {
    return Bad(e, "prompt", "'prompt' must be a string (or give the chat's 'messages')");
  } else {
    r.set_text((*body)["prompt"].get<std::string>());
  }
  bool add = true;
  auto has = Bool(*body, "add_special_tokens", &add, e);
  if (!has.ok()) return has.status();
  if (*has) r.set_add_special_tokens(add);
  return r;
}

absl::StatusOr<llm::v1::DetokenizeRequest> ParseDetokenizeBody(std::string_view text, ApiError* e,
                                                               const ParseOptions& options) {
  auto body = ParseObject(text, {"model", "tokens"}, options, e);
  if (!body.ok()) return body.status();
  llm::v1::DetokenizeRequest r;
  auto model = Model(*body, e);
  if (!model.ok()) return model.status();
  r.set_model(*model);
  const json& tokens = (*body)["tokens"];
  if (!Present(*body, "tokens") || !tokens.is_array()) {
    return Bad(e, "tokens", "'tokens' must be an array of token ids");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const json& t = tokens[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Bad(e, absl::StrCat("tokens[", i, "]"), "a token id must be an integer >= 0");
    }
    r.add_token_ids(static_cast<int32_t>(t.get<int64_t>()));
  }
  return r;
}

std::string TokenizeResponseBody(const llm::v1::TokenizeResponse& response) {
  json tokens = json::array();
  for (int32_t id : response.token_ids()) tokens.push_back(id);
  return json{{"count", response.token_ids_size()},
              {"max_model_len", response.max_context_tokens()},
              {"tokens", tokens}}
      .dump();
}

std::string DetokenizeResponseBody(const llm::v1::DetokenizeResponse& response) {
  // A text cut inside a character (byte tokens) gets U+FFFD in its place rather than a throw.
  return json{{"prompt", response.text()}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace llm::router::openai
