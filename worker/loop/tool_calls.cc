#include "worker/loop/tool_calls.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "worker/tools/tool_grammar.h"

namespace llm::loop {

namespace {

// The regex of a marker: the special token where the tokenizer has the marker as one.
tools::MarkerRegex MarkersOf(const frontend::Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return nullptr;
  return [tokenizer](std::string_view marker) {
    const auto id = tokenizer->TokenToId(std::string(marker));
    return id && tokenizer->IsSpecial(*id) ? constraint::SpecialTokenBytes(*id)
                                           : constraint::EscapeRegex(marker);
  };
}

}  // namespace

absl::Status PrepareToolCalls(tools::ToolFormat format, const frontend::Tokenizer* tokenizer,
                              GenerateSpec& spec, std::shared_ptr<StreamSink>& sink) {
  const ChatPrompt& chat = *spec.chat;
  auto parsed = tools::ParseTools(chat.tools);
  if (!parsed.ok()) return parsed.status();
  const tools::ToolChoice& choice = chat.tool_choice;
  using Mode = tools::ToolChoice::Mode;
  if (absl::Status st = tools::CheckToolChoice(*parsed, choice); !st.ok()) return st;
  if (parsed->empty() || choice.mode == Mode::kNone) return absl::OkStatus();
  const bool forced = choice.mode == Mode::kRequired || choice.mode == Mode::kFunction;
  if (format == tools::ToolFormat::kNone) {
    if (!forced) {
      return absl::InvalidArgumentError(
          "tool_choice: \"auto\" needs a call format to read the model's calls in, and this "
          "worker has none (model.tool_call_parser is none, or auto found no call format in "
          "the chat template); send tool_choice \"none\", \"required\" or a named function, "
          "or set model.tool_call_parser");
    }
    // The grammar writes the calls, in a form of our own: the template has none.
    format = tools::ToolFormat::kJson;
  }
  if (forced) {
    if (spec.ignore_eos) {
      return absl::InvalidArgumentError(
          "ignore_eos: not with a required or named tool call (the calls end by EOS)");
    }
    if (spec.constraint.enabled()) {
      return absl::InvalidArgumentError(
          "tool_choice: a required or named call cannot be combined with a constraint "
          "(response_format); use one or the other");
    }
    auto rules = tools::ToolCallPatterns(format, *parsed, choice, chat.parallel_tool_calls,
                                         MarkersOf(tokenizer));
    if (!rules.ok()) return rules.status();
    spec.constraint.kind = constraint::Kind::kRegex;
    spec.constraint.built = *std::move(rules);
  }
  spec.skip_special_tokens = false;
  std::vector<std::string> names;
  for (const tools::Tool& t : *parsed) names.push_back(t.name);
  sink = std::make_shared<ToolCallSink>(format, chat.parallel_tool_calls, std::move(names),
                                        std::move(sink));
  return absl::OkStatus();
}

ToolCallSink::ToolCallSink(tools::ToolFormat format, bool parallel, std::vector<std::string> names,
                           std::shared_ptr<StreamSink> inner)
    : format_(format), parser_(format, parallel, std::move(names)), inner_(std::move(inner)) {}

std::string ToolCallSink::NewId() {
  // Mistral's template takes ids of exactly 9 letters and digits; OpenAI's look like call_...
  static constexpr std::string_view kAlphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  const bool mistral = format_ == tools::ToolFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[pick(rng)];
  return id;
}

void ToolCallSink::OnUpdate(StreamUpdate update) {
  tools::ParseOutput out = parser_.Feed(update.text);
  if (update.finished) {
    tools::ParseOutput last = parser_.Finish();
    out.content += last.content;
    for (auto& c : last.calls) out.calls.push_back(std::move(c));
    update.called_tools = parser_.calls() > 0;
  }
  update.text = std::move(out.content);
  for (tools::ParsedCall& piece : out.calls) {
    // A call's first piece has its name, and gets its id; later pieces extend its arguments.
    std::string id = piece.name.empty() ? std::string() : NewId();
    update.tool_calls.push_back(
        {piece.index, std::move(id), std::move(piece.name), std::move(piece.arguments)});
  }
  inner_->OnUpdate(std::move(update));
}

}  // namespace llm::loop
