#include "router/openai/reference_fields.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "router/openai/body_fields.h"

namespace llm::router::openai {

namespace {

using json = nlohmann::ordered_json;

struct IgnoredField {
  const char* name;
  json::value_t type;  // what the reference gives it (checked)
  const char* why;
};

constexpr IgnoredField kIgnored[] = {
    {"service_tier", json::value_t::string, "one service tier"},
    {"verbosity", json::value_t::string, "no control of verbosity for these models"},
    {"safety_identifier", json::value_t::string, "no safety system to report to"},
    {"prediction", json::value_t::object, "no predicted-output path"},
    {"web_search_options", json::value_t::object, "no web search tool"},
};

const char* TypeName(json::value_t t) {
  return t == json::value_t::string ? "a string" : "an object";
}

absl::Status ParseLogitBias(const json& body, llm::v1::GenerateRequest& r, ApiError* e) {
  const json& bias = body["logit_bias"];
  if (!bias.is_object()) return Bad(e, "logit_bias", "'logit_bias' must be an object");
  auto* out = r.mutable_sampling()->mutable_logit_bias();
  for (const auto& [key, value] : bias.items()) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(key, &id) || id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return Bad(e, "logit_bias",
                 absl::StrCat("'logit_bias' keys must be token ids, got '", key, "'"));
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100 ||
        value.get<double>() > 100) {
      return Bad(
          e, "logit_bias",
          absl::StrCat("'logit_bias' values must be numbers in [-100, 100] (token ", key, ")"));
    }
    (*out)[static_cast<int32_t>(id)] = static_cast<float>(value.get<double>());
  }
  return absl::OkStatus();
}

absl::Status ParseModalities(const json& body, ApiError* e) {
  if (Present(body, "modalities")) {
    const json& m = body["modalities"];
    if (!m.is_array()) return Bad(e, "modalities", "'modalities' must be an array of strings");
    for (const json& x : m) {
      if (!x.is_string()) return Bad(e, "modalities", "'modalities' must be an array of strings");
      if (x != "text") {
        return Bad(
            e, "modalities",
            absl::StrCat("modality '", x.get<std::string>(), "' is not supported: text only"));
      }
    }
  }
  if (Present(body, "audio")) {
    return Bad(e, "audio", "'audio' output is not supported: text only");
  }
  return absl::OkStatus();
}

// reasoning_effort into the template's variables, unless chat_template_kwargs set it.
absl::Status ParseReasoningEffort(const json& body, llm::v1::GenerateRequest& r, ApiError* e) {
  const json& effort = body["reasoning_effort"];
  if (!effort.is_string()) return Bad(e, "reasoning_effort", "'reasoning_effort' must be a string");
  llm::v1::Chat* chat = r.mutable_chat();
  json kwargs = chat->template_kwargs_json().empty()
                    ? json::object()
                    : json::parse(chat->template_kwargs_json(), nullptr, false);
  if (!kwargs.is_object()) kwargs = json::object();
  if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = effort;
  chat->set_template_kwargs_json(kwargs.dump());
  return absl::OkStatus();
}

}  // namespace

bool IsReferenceField(ApiKind kind, const std::string& key) {
  if (key == "logit_bias") return true;
  if (kind != ApiKind::kChat) return false;
  for (const IgnoredField& f : kIgnored) {
    if (key == f.name) return true;
  }
  return key == "reasoning_effort" || key == "prompt_cache_key" || key == "modalities" ||
         key == "audio";
}

absl::Status ParseReferenceFields(const json& body, ApiKind kind, llm::v1::GenerateRequest& r,
                                  ApiError* e) {
  if (Present(body, "logit_bias")) LLM_RETURN_IF_ERROR(ParseLogitBias(body, r, e));
  if (kind != ApiKind::kChat) return absl::OkStatus();
  LLM_RETURN_IF_ERROR(ParseModalities(body, e));
  if (Present(body, "reasoning_effort")) LLM_RETURN_IF_ERROR(ParseReasoningEffort(body, r, e));
  if (Present(body, "prompt_cache_key")) {
    if (!body["prompt_cache_key"].is_string()) {
      return Bad(e, "prompt_cache_key", "'prompt_cache_key' must be a string");
    }
    r.set_prompt_cache_key(body["prompt_cache_key"].get<std::string>());
  }
  for (const IgnoredField& f : kIgnored) {
    if (!Present(body, f.name)) continue;
    if (body[f.name].type() != f.type) {
      return Bad(e, f.name, absl::StrCat("'", f.name, "' must be ", TypeName(f.type)));
    }
    LogIgnoredOnce(f.name, f.why);
  }
  return absl::OkStatus();
}

void LogIgnoredOnce(const std::string& key, const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mu);
  if (logged.size() >= 64 || !logged.insert(key).second) return;
  std::fprintf(stderr, "llm-router: OpenAI field '%s' accepted and ignored: %s (logged once)\n",
               key.c_str(), why.c_str());
}

}  // namespace llm::router::openai
