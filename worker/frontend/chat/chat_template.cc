#include "worker/frontend/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "worker/frontend/gguf_tokenizer.h"
#include "worker/model/gguf_model.h"

namespace llm::frontend {

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A special token of tokenizer_config.json: a string, or an AddedToken {"content": ...}.
std::optional<std::string> Token(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

absl::StatusOr<jinja::Template> Compile(const std::string& text, const std::string& where) {
  auto t = jinja::Template::Parse(text);
  if (!t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", t.status().message()));
  }
  return *std::move(t);
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromSource(const std::string& source,
                                                      std::optional<std::string> bos_token,
                                                      std::optional<std::string> eos_token) {
  ChatTemplate c;
  auto t = Compile(source, "chat template");
  if (!t.ok()) return t.status();
  c.templates_.emplace("default", *std::move(t));
  c.bos_token_ = std::move(bos_token);
  c.eos_token_ = std::move(eos_token);
  c.source_ = "text";
  c.text_ = source;
  return c;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Load(const std::string& dir,
                                                const std::string& override_file) {
  ChatTemplate c;
  nlohmann::json config = nlohmann::json::object();
  const bool gguf = model::IsGgufPath(dir);  // its tokenizer.chat_template, as tokenizer_config
  const std::string config_path =
      dir.empty() ? "" : (gguf ? dir + " tokenizer.chat_template" : dir + "/tokenizer_config.json");
  if (gguf) {
    auto gguf_config = TokenizerConfigFromGgufPath(dir);
    if (!gguf_config.ok()) return gguf_config.status();
    config = *std::move(gguf_config);
    c.bos_token_ = Token(config, "bos_token");
    c.eos_token_ = Token(config, "eos_token");
  } else if (!config_path.empty() && std::filesystem::exists(config_path)) {
    auto text = ReadFile(config_path);
    if (!text.ok()) return text.status();
    config = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": not a JSON object"));
    }
    c.bos_token_ = Token(config, "bos_token");
    c.eos_token_ = Token(config, "eos_token");
  }
  const std::string beside = dir.empty() || gguf ? "" : dir + "/chat_template.jinja";
  for (const std::string& file : {override_file, beside}) {
    if (file.empty() || (file == beside && !std::filesystem::exists(file))) continue;
    auto text = ReadFile(file);
    if (!text.ok()) return text.status();
    auto t = Compile(*text, file);
    if (!t.ok()) return t.status();
    c.templates_.emplace("default", *std::move(t));
    c.source_ = file;
    c.text_ = *std::move(text);
    return c;
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    return absl::NotFoundError(
        dir.empty() ? "no chat template (set model.chat_template)"
        : gguf      ? absl::StrCat("no chat template in ", dir,
                                   " (no tokenizer.chat_template; set model.chat_template)")
                    : absl::StrCat("no chat template in ", dir,
                                   " (tokenizer_config.json has no chat_template and there is "
                                        "no chat_template.jinja; set model.chat_template)"));
  }
  if (it->is_string()) {
    auto t = Compile(it->get<std::string>(), config_path + " chat_template");
    if (!t.ok()) return t.status();
    c.templates_.emplace("default", *std::move(t));
    c.text_ = it->get<std::string>();
  } else if (it->is_array()) {
    for (const auto& named : *it) {
      if (!named.is_object() || !named.contains("name") || !named.contains("template") ||
          !named["name"].is_string() || !named["template"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            config_path, ": chat_template entries must be {\"name\", \"template\"} objects"));
      }
      const std::string name = named["name"].get<std::string>();
      auto t = Compile(named["template"].get<std::string>(),
                       absl::StrCat(config_path, " chat_template '", name, "'"));
      if (!t.ok()) return t.status();
      c.templates_.emplace(name, *std::move(t));
      c.text_ += named["template"].get<std::string>();
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": chat_template must be a string or a list"));
  }
  c.source_ = config_path;
  return c;
}

absl::StatusOr<std::string> ChatTemplate::Apply(const nlohmann::ordered_json& messages,
                                                const nlohmann::ordered_json& tools,
                                                bool add_generation_prompt,
                                                const nlohmann::ordered_json& kwargs,
                                                const jinja::RenderOptions& options) const {
  // Copying and converting a value recurse over it: a value nested deeper than anything a chat
  // needs is refused first (20,000 levels overflowed the stack).
  // Messages get two more levels: the list and each message object wrap the fields that the
  // worker checks one by one (a tool call's arguments may nest kMaxJsonNesting deep).
  for (const auto& [name, value, limit] :
       {std::tuple<const char*, const nlohmann::ordered_json*, int>{"messages", &messages,
                                                                    kMaxJsonNesting + 2},
        {"tools", &tools, kMaxJsonNesting},
        {"kwargs", &kwargs, kMaxJsonNesting}}) {
    if (JsonNestsDeeperThan(*value, limit)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": nested more than ", limit, " deep"));
    }
  }
  const bool has_tools = tools.is_array();  // transformers: any list, even an empty one
  auto which = templates_.end();
  if (has_tools) which = templates_.find("tool_use");
  if (which == templates_.end()) which = templates_.find("default");
  if (which == templates_.end()) {
    return absl::InvalidArgumentError(
        "the model has several chat templates and none is named 'default'");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (bos_token_) context["bos_token"] = *bos_token_;
  if (eos_token_) context["eos_token"] = *eos_token_;
  if (kwargs.is_object()) {
    for (const auto& [k, v] : kwargs.items()) context[k] = v;
  }
  context["messages"] = messages;
  context["tools"] = has_tools ? tools : nlohmann::ordered_json(nullptr);
  if (!context.contains("documents")) context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  return which->second.Render(context, options);
}

absl::StatusOr<std::string> ChatTemplate::ApplyContinuing(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    const nlohmann::ordered_json& kwargs) const {
  constexpr const char* kField = "chat.continue_final_message: ";
  // The last message's text is rendered as a marker no conversation holds: the prompt is what
  // the template writes before it, then the text as sent (a template that trims or rewrites
  // the text, or writes it elsewhere too, cannot misplace the cut).
  constexpr std::string_view kMarker = "llmcontinuefinalmessage7d1f3a";
  const nlohmann::ordered_json* last = messages.empty() ? nullptr : &messages.back();
  const std::string text =
      last != nullptr && last->contains("content") && (*last)["content"].is_string()
          ? (*last)["content"].get<std::string>()
          : std::string();
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kField, "the last message has no text to continue"));
  }
  nlohmann::ordered_json marked = messages;
  marked.back()["content"] = kMarker;
  auto rendered = Apply(marked, tools, /*add_generation_prompt=*/false, kwargs);
  if (!rendered.ok()) return rendered.status();
  const size_t at = rendered->rfind(kMarker);
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(kField,
                     "the chat template does not write the last message's text as sent, "
                     "so it cannot be continued"));
  }
  rendered->resize(at);
  rendered->append(text);
  return rendered;
}

}  // namespace llm::frontend
