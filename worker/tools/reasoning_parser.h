// A reasoning model's thinking read out of its output, kept apart from its answer: the text
// between <think> and </think> (Qwen3, QwQ, DeepSeek R1 and its distills, Granite 3.3), which
// the answer carries as its reasoning (llm.v1 GenerateResponse.reasoning_text).
//
//   ResolveReasoningFormat  model.reasoning_parser: "think", "none", or "auto": think where the
//                           chat template writes both markers, else none.
//   PromptOpensReasoning    the rendered prompt ends (whitespace aside) with <think>: DeepSeek
//                           R1's and QwQ's generation prompts open one, so the output starts
//                           in the reasoning.
//   ReasoningParser         the output's text, piece by piece -> {reasoning, content}.
//
// The output is reasoning when the prompt opened a think block, or when it starts (after
// whitespace) with <think>; the reasoning runs to </think>, and everything after it is content.
// The markers are dropped, and so is the whitespace around the reasoning (the newlines after
// <think> and before </think>) and before the answer (the blank line after </think>). An output
// that does not start with <think> is all content, as is a later <think>. A reasoning never
// closed (the length limit) is all reasoning. Text that may be the start of a marker is held
// back until the next piece settles it, or Finish. Not read: Granite 3.3's <response> tags
// (they stay in the content), and an R1 answer after tool outputs, where its template opens no
// block (all content, </think> included).
#ifndef LLM_WORKER_TOOLS_REASONING_PARSER_H_
#define LLM_WORKER_TOOLS_REASONING_PARSER_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace llm::tools {

enum class ReasoningFormat { kNone, kThink };

// `name` as model.reasoning_parser writes it; "auto" picks the format of `template_source` (a
// chat template's text; empty: none). INVALID_ARGUMENT naming model.reasoning_parser otherwise.
absl::StatusOr<ReasoningFormat> ResolveReasoningFormat(std::string_view name,
                                                       std::string_view template_source);
std::string_view ReasoningFormatName(ReasoningFormat format);

bool PromptOpensReasoning(std::string_view prompt);

struct ReasoningOutput {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // `in_reasoning`: the prompt opened a think block (PromptOpensReasoning).
  explicit ReasoningParser(bool in_reasoning);

  // The next piece of the output: what it settles.
  ReasoningOutput Feed(std::string_view text);
  // The end of the output: what was held back (a marker's start that never completed).
  ReasoningOutput Finish();

 private:
  enum class State { kStart, kReasoning, kContent };

  // Appends `text` to the current kind's output, dropping leading whitespace while trim_.
  void Emit(std::string_view text, ReasoningOutput& out);

  State state_;
  bool trim_;         // drop whitespace until the current kind's first other character
  std::string held_;  // kStart: the output so far; kReasoning: a possible start of </think>
};

}  // namespace llm::tools

#endif  // LLM_WORKER_TOOLS_REASONING_PARSER_H_
