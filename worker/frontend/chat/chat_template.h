// A model's chat template and how it is applied, as transformers' apply_chat_template does:
// the template renders the conversation with `messages`, `tools` (none when absent),
// `documents` (none when absent), `add_generation_prompt`, the model's `bos_token` and
// `eos_token` (each only when the model sets it), and extra keyword arguments (for example
// `enable_thinking`).
//
// Where the template comes from, first found wins: an explicit file (model.chat_template),
// chat_template.jinja in the tokenizer's directory, tokenizer_config.json's `chat_template`
// (a string, or a list of named templates: "tool_use" when tools are given and it exists,
// else "default"); for a GGUF file in place of the directory, its tokenizer.chat_template.
#ifndef LLM_WORKER_FRONTEND_CHAT_CHAT_TEMPLATE_H_
#define LLM_WORKER_FRONTEND_CHAT_CHAT_TEMPLATE_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/frontend/chat/jinja_template.h"

namespace llm::frontend {

class ChatTemplate {
 public:
  // From `dir` (a tokenizer or model directory, or a GGUF file; may be empty) and
  // `override_file` (may be empty). NOT_FOUND when neither holds a template; INVALID_ARGUMENT
  // naming the file and line when one does not parse.
  static absl::StatusOr<ChatTemplate> Load(const std::string& dir,
                                           const std::string& override_file);
  // A template from its text (named templates: none), with these special tokens.
  static absl::StatusOr<ChatTemplate> FromSource(const std::string& source,
                                                 std::optional<std::string> bos_token,
                                                 std::optional<std::string> eos_token);

  // Renders a conversation. `tools`: null or an array; `kwargs`: an object (or null).
  absl::StatusOr<std::string> Apply(const nlohmann::ordered_json& messages,
                                    const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                    const nlohmann::ordered_json& kwargs,
                                    const jinja::RenderOptions& options = {}) const;
  // Renders a conversation whose last message the answer continues (a prefill;
  // llm.v1.Chat.continue_final_message): what Apply without the generation prompt writes
  // before that message's text, then the text as sent, so the template's end-of-turn does not
  // close it. INVALID_ARGUMENT when that message has no text, or the template does not write
  // its text unchanged.
  absl::StatusOr<std::string> ApplyContinuing(const nlohmann::ordered_json& messages,
                                              const nlohmann::ordered_json& tools,
                                              const nlohmann::ordered_json& kwargs) const;

  // bos_token / eos_token for a template whose tokenizer_config.json does not name them (a
  // synthetic model's tokenizer): these, where they are unset.
  void DefaultSpecialTokens(std::optional<std::string> bos_token,
                            std::optional<std::string> eos_token) {
    if (!bos_token_) bos_token_ = std::move(bos_token);
    if (!eos_token_) eos_token_ = std::move(eos_token);
  }

  // Where the template came from (a file, or "tokenizer_config.json").
  const std::string& source() const { return source_; }
  // The template's text (every named template's, one after another): what tool-call formats
  // are detected from (worker/tools/tool_format.h).
  const std::string& text() const { return text_; }

 private:
  ChatTemplate() = default;
  std::map<std::string, jinja::Template> templates_;  // "default", "tool_use", ...
  std::optional<std::string> bos_token_, eos_token_;
  std::string source_;
  std::string text_;
};

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_CHAT_CHAT_TEMPLATE_H_
