#include "worker/tools/tool_call_parser.h"

#include <algorithm>
#include <optional>

#include "common/json_depth.h"
#include "nlohmann/json.hpp"

namespace llm::tools {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kSpace = " \t\r\n";

// How many bytes at the end of `s` could be the start of `marker`.
size_t HeldBack(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

size_t SkipSpace(std::string_view s) { return std::min(s.find_first_not_of(kSpace), s.size()); }

// A call's JSON object: {"name": ..., "arguments" or "parameters": {...} or its text}, of one
// of `names` (empty: any); `need_args`: one of the two keys must be there.
std::optional<ParsedCall> ParseCall(std::string_view text, const std::vector<std::string>& names,
                                    bool need_args) {
  const auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  ParsedCall call{name->get<std::string>(), "{}"};
  if (!names.empty() && std::find(names.begin(), names.end(), call.name) == names.end()) {
    return std::nullopt;
  }
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end()) {
    if (need_args) return std::nullopt;
    return call;
  }
  if (args->is_string()) {  // the arguments' JSON text: kept only when it is an object
    const auto parsed = nlohmann::ordered_json::parse(args->get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) return std::nullopt;
    call.arguments = parsed.dump();
  } else if (args->is_object()) {
    call.arguments = args->dump();
  } else {
    return std::nullopt;
  }
  return call;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolFormat format, bool parallel, std::vector<std::string> names)
    : format_(format),
      parallel_(parallel),
      names_(std::move(names)),
      state_(format == ToolFormat::kLlama3Json ? State::kStart
             : format == ToolFormat::kNone     ? State::kTail
                                               : State::kText) {}

ParseOutput ToolCallParser::Feed(std::string_view text) {
  pending_ += text;
  ParseOutput out;
  while (!pending_.empty() && Step(out)) {
  }
  return out;
}

ParseOutput ToolCallParser::Finish() {
  ParseOutput out;
  if (state_ == State::kStart || state_ == State::kBeforeList || state_ == State::kBeforeObject ||
      state_ == State::kObject) {
    // A call that never completed: its text is content.
    Content(out, raw_);
    raw_.clear();
  }
  Content(out, pending_);
  pending_.clear();
  state_ = State::kTail;
  return out;
}

void ToolCallParser::Content(ParseOutput& out, std::string_view text) {
  if (calls_ == 0) {
    out.content += text;
    return;
  }
  // After a call, whitespace counts only when text follows it.
  const size_t last = text.find_last_not_of(kSpace);
  if (last == std::string_view::npos) {
    space_ += text;
    return;
  }
  out.content += space_;
  out.content += text.substr(0, last + 1);
  space_ = text.substr(last + 1);
}

void ToolCallParser::Consume(size_t n) {
  raw_ += pending_.substr(0, n);
  pending_.erase(0, n);
}

void ToolCallParser::GiveBack(ParseOutput& out) {
  Content(out, raw_);
  raw_.clear();
  state_ = format_ == ToolFormat::kLlama3Json ? State::kTail : State::kText;
}

bool ToolCallParser::Step(ParseOutput& out) {
  switch (state_) {
    case State::kStart:
      return StepStart();
    case State::kText:
      return StepText(out);
    case State::kTail:
      Content(out, pending_);
      pending_.clear();
      return false;
    case State::kBeforeList:
    case State::kBeforeObject: {
      const size_t i = SkipSpace(pending_);
      if (i == pending_.size()) return false;
      if (state_ == State::kBeforeList && pending_[i] == '[') {
        Consume(i + 1);
        state_ = State::kBeforeObject;
        return true;
      }
      if (pending_[i] != '{') {
        GiveBack(out);
        return true;
      }
      Consume(i);
      state_ = State::kObject;
      scanned_ = 0;
      depth_ = 0;
      in_string_ = escaped_ = false;
      return true;
    }
    case State::kObject:
      return StepObject(out);
    case State::kAfterObject:
      return StepAfterObject();
  }
  return false;
}

bool ToolCallParser::StepStart() {
  const size_t i = SkipSpace(pending_);
  if (i == pending_.size()) return false;
  const std::string_view rest = std::string_view(pending_).substr(i);
  if (rest.starts_with(kPythonTag)) {
    tagged_ = true;
    Consume(i + kPythonTag.size());
    state_ = State::kBeforeObject;
    return true;
  }
  if (kPythonTag.starts_with(rest)) return false;
  if (rest[0] == '{') {
    Consume(i);
    state_ = State::kBeforeObject;
    return true;
  }
  state_ = State::kTail;
  return true;
}

bool ToolCallParser::StepText(ParseOutput& out) {
  const std::string_view marker = format_ == ToolFormat::kHermes ? kHermesOpen : kMistralOpen;
  const size_t at = pending_.find(marker);
  if (at != std::string::npos) {
    Content(out, std::string_view(pending_).substr(0, at));
    pending_.erase(0, at);
    raw_.clear();
    Consume(marker.size());
    state_ = format_ == ToolFormat::kMistral ? State::kBeforeList : State::kBeforeObject;
    return true;
  }
  const size_t ready = pending_.size() - HeldBack(pending_, marker);
  Content(out, std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return false;
}

bool ToolCallParser::StepObject(ParseOutput& out) {
  bool complete = false;
  for (; scanned_ < pending_.size() && !complete; ++scanned_) {
    const char c = pending_[scanned_];
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      if (++depth_ > kMaxJsonNesting) {  // no call nests this deep: text
        GiveBack(out);
        return true;
      }
    } else if (c == '}' || c == ']') {
      complete = --depth_ == 0;
    }
  }
  if (!complete) return false;
  const size_t length = scanned_;
  const bool need_args = format_ == ToolFormat::kLlama3Json && !tagged_;
  const std::optional<ParsedCall> call =
      ParseCall(std::string_view(pending_).substr(0, length), names_, need_args);
  Consume(length);
  if (!call) {
    GiveBack(out);
    return true;
  }
  if (parallel_ || calls_ == 0) {
    out.calls.push_back(*call);
    ++calls_;
  }
  raw_.clear();
  space_.clear();
  state_ = State::kAfterObject;
  return true;
}

bool ToolCallParser::StepAfterObject() {
  const size_t i = SkipSpace(pending_);
  if (i == pending_.size()) return false;
  const std::string_view rest = std::string_view(pending_).substr(i);
  State next = format_ == ToolFormat::kLlama3Json ? State::kTail : State::kText;
  size_t used = i;
  if (format_ == ToolFormat::kHermes) {
    if (rest.starts_with(kHermesClose)) {
      used += kHermesClose.size();
    } else if (kHermesClose.starts_with(rest)) {
      return false;
    }
  } else if (format_ == ToolFormat::kMistral && (rest[0] == ',' || rest[0] == ']')) {
    used += 1;
    if (rest[0] == ',') next = State::kBeforeObject;
  } else if (format_ == ToolFormat::kLlama3Json && rest[0] == ';') {
    used += 1;
    next = State::kBeforeObject;
  }
  // A separator stays with the next call's text: given back with it if that is no call.
  raw_ = next == State::kBeforeObject ? pending_.substr(0, used) : std::string();
  pending_.erase(0, used);
  state_ = next;
  return true;
}

}  // namespace llm::tools
