#include "worker/tools/reasoning_parser.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/tools/partial_marker.h"

namespace llm::tools {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
constexpr std::string_view kSpace = " \t\r\n";

// The length of `s` without its trailing whitespace.
size_t EndWithoutSpace(std::string_view s) {
  const size_t last = s.find_last_not_of(kSpace);
  return last == std::string_view::npos ? 0 : last + 1;
}

}  // namespace

absl::StatusOr<ReasoningFormat> ResolveReasoningFormat(std::string_view name,
                                                       std::string_view template_source) {
  if (name == "none") return ReasoningFormat::kNone;
  if (name == "think") return ReasoningFormat::kThink;
  if (name == "auto") {
    const bool both = template_source.find(kOpen) != std::string_view::npos &&
                      template_source.find(kClose) != std::string_view::npos;
    return both ? ReasoningFormat::kThink : ReasoningFormat::kNone;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model.reasoning_parser: '", std::string(name), "' is not auto, think or none"));
}

std::string_view ReasoningFormatName(ReasoningFormat format) {
  return format == ReasoningFormat::kThink ? "think" : "none";
}

bool PromptOpensReasoning(std::string_view prompt) {
  // Its end only: a <think> a user wrote earlier opens nothing.
  return prompt.substr(0, EndWithoutSpace(prompt)).ends_with(kOpen);
}

ReasoningParser::ReasoningParser(bool in_reasoning)
    : state_(in_reasoning ? State::kReasoning : State::kStart), trim_(in_reasoning) {}

void ReasoningParser::Emit(std::string_view text, ReasoningOutput& out) {
  if (trim_) {
    const size_t keep = text.find_first_not_of(kSpace);
    if (keep == std::string_view::npos) return;
    text.remove_prefix(keep);
    trim_ = false;
  }
  (state_ == State::kReasoning ? out.reasoning : out.content).append(text);
}

ReasoningOutput ReasoningParser::Feed(std::string_view text) {
  ReasoningOutput out;
  held_.append(text);
  if (state_ == State::kStart) {
    std::string_view rest = held_;
    rest.remove_prefix(std::min(rest.size(), rest.find_first_not_of(kSpace)));
    if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return out;
    if (!rest.starts_with(kOpen)) {  // no reasoning: all of it is content
      state_ = State::kContent;
      Emit(held_, out);
      held_.clear();
      return out;
    }
    held_ = std::string(rest.substr(kOpen.size()));
    state_ = State::kReasoning;
    trim_ = true;
  }
  if (state_ == State::kContent) {
    Emit(held_, out);
    held_.clear();
    return out;
  }
  // The whitespace before </think> is dropped too: held until what follows settles it.
  const auto before_space = [this](size_t end) {
    return EndWithoutSpace(std::string_view(held_).substr(0, end));
  };
  const size_t close = held_.find(kClose);
  if (close == std::string::npos) {
    const size_t keep = before_space(held_.size() - PartialMarkerAtEnd(held_, kClose));
    Emit(std::string_view(held_).substr(0, keep), out);
    held_.erase(0, keep);
    return out;
  }
  Emit(std::string_view(held_).substr(0, before_space(close)), out);
  const std::string after = held_.substr(close + kClose.size());
  held_.clear();
  state_ = State::kContent;
  trim_ = true;
  Emit(after, out);
  return out;
}

ReasoningOutput ReasoningParser::Finish() {
  ReasoningOutput out;
  if (state_ == State::kStart) state_ = State::kContent;  // "<thi" and no more: content
  if (state_ == State::kReasoning) {                      // cut off: trimmed as a closed one is
    held_.resize(EndWithoutSpace(held_));
  }
  Emit(held_, out);
  held_.clear();
  return out;
}

}  // namespace llm::tools
