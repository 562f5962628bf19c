#include "worker/tools/tool_call_parser.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "common/json_depth.h"
#include "nlohmann/json.hpp"
#include "worker/tools/partial_marker.h"

namespace llm::tools {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kGraniteOpen = "<|tool_call|>";
constexpr std::string_view kSpace = " \t\r\n";

size_t SkipSpace(std::string_view s) { return std::min(s.find_first_not_of(kSpace), s.size()); }

// Whether a call's object opens as {"name": "<name>", "arguments" or "parameters": {, the
// shape in which its arguments stream. kMore: `s` ends before that can be told.
enum class Opening { kMore, kNo, kYes };

// Reads that opening off `s`, one token at a time; `length`: the bytes it spans.
class OpeningReader {
 public:
  explicit OpeningReader(std::string_view s) : s_(s) {}

  Opening Read(std::string& name, size_t& length) {
    std::string key;
    Opening o;
    if ((o = Punct('{')) != Opening::kYes || (o = String(key)) != Opening::kYes) return o;
    if (key != "name") return Opening::kNo;
    if ((o = Punct(':')) != Opening::kYes || (o = String(name)) != Opening::kYes ||
        (o = Punct(',')) != Opening::kYes || (o = String(key)) != Opening::kYes) {
      return o;
    }
    if (key != "arguments" && key != "parameters") return Opening::kNo;
    if ((o = Punct(':')) != Opening::kYes || (o = Punct('{')) != Opening::kYes) return o;
    length = i_;
    return name.empty() ? Opening::kNo : Opening::kYes;
  }

 private:
  Opening Punct(char c) {
    i_ += SkipSpace(s_.substr(i_));
    if (i_ == s_.size()) return Opening::kMore;
    if (s_[i_] != c) return Opening::kNo;
    ++i_;
    return Opening::kYes;
  }

  Opening String(std::string& out) {
    if (Opening o = Punct('"'); o != Opening::kYes) return o;
    const size_t start = i_ - 1;
    for (bool escaped = false; i_ < s_.size(); ++i_) {
      if (escaped) {
        escaped = false;
      } else if (s_[i_] == '\\') {
        escaped = true;
      } else if (s_[i_] == '"') {
        const auto j = nlohmann::json::parse(s_.substr(start, ++i_ - start), nullptr, false);
        if (!j.is_string()) return Opening::kNo;
        out = j.get<std::string>();
        return Opening::kYes;
      }
    }
    return Opening::kMore;
  }

  std::string_view s_;
  size_t i_ = 0;
};

// An opening this long and still undecided is not one a call writes: the object is read whole.
constexpr size_t kMaxOpening = 4096;

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
  ParsedCall call{0, name->get<std::string>(), "{}"};
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
             : format == ToolFormat::kJson     ? State::kBeforeList
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
      state_ == State::kObject || state_ == State::kCallRest) {
    // A call that never completed nor committed, or a committed call's keys after its
    // arguments that never closed: that text is content.
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
  state_ = TextAfterCalls();
}

ToolCallParser::State ToolCallParser::TextAfterCalls() const {
  // Only mistral, granite and hermes write calls after text; the others' calls are the whole
  // answer.
  return ListAfterMarker() || format_ == ToolFormat::kHermes ? State::kText : State::kTail;
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
      whole_ = !parallel_ && calls_ > 0;  // a dropped call: no need to stream it
      return true;
    }
    case State::kObject:
      return StepObject(out);
    case State::kArguments:
    case State::kCallEnd:
    case State::kCallRest:
      return StepCommitted(out);
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
  // Granite 3.1 wrote <tool_call> where 3.3's template asks for <|tool_call|>: both open a list.
  std::vector<std::string_view> markers = {format_ == ToolFormat::kHermes    ? kHermesOpen
                                           : format_ == ToolFormat::kGranite ? kGraniteOpen
                                                                             : kMistralOpen};
  if (format_ == ToolFormat::kGranite) markers.push_back(kHermesOpen);
  size_t at = std::string::npos, length = 0, partial = 0;
  for (std::string_view marker : markers) {
    const size_t found = pending_.find(marker);
    if (found < at) {
      at = found;
      length = marker.size();
    }
    partial = std::max(partial, PartialMarkerAtEnd(pending_, marker));
  }
  if (at != std::string::npos) {
    Content(out, std::string_view(pending_).substr(0, at));
    pending_.erase(0, at);
    raw_.clear();
    Consume(length);
    state_ = ListAfterMarker() ? State::kBeforeList : State::kBeforeObject;
    return true;
  }
  const size_t ready = pending_.size() - partial;
  Content(out, std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return false;
}

size_t ToolCallParser::Scan(std::string_view s, size_t from, int max_depth, std::string* emit) {
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    bool keep = true, closed = false;
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
      ++depth_;
    } else if (c == '}' || c == ']') {
      closed = --depth_ == 0;
    } else {
      keep = kSpace.find(c) == std::string_view::npos;
    }
    if (emit != nullptr && keep) *emit += c;
    if (closed || depth_ > max_depth) return i + 1;
  }
  return s.size();
}

bool ToolCallParser::StepObject(ParseOutput& out) {
  if (!whole_) {
    std::string name;
    size_t length = 0;
    const Opening opening = OpeningReader(pending_).Read(name, length);
    const bool offered =
        names_.empty() || std::find(names_.begin(), names_.end(), name) != names_.end();
    if (opening == Opening::kYes && offered) {
      StartArguments(out, std::move(name), length);
      return true;
    }
    whole_ = opening != Opening::kMore || pending_.size() > kMaxOpening;
  }
  scanned_ = Scan(pending_, scanned_, kMaxJsonNesting, nullptr);
  if (depth_ > kMaxJsonNesting) {  // no call nests this deep: text
    GiveBack(out);
    return true;
  }
  if (depth_ != 0) return false;
  const size_t length = scanned_;
  // An untagged llama3_json object, or a json array's, with no arguments is an answer in JSON.
  const bool need_args =
      (format_ == ToolFormat::kLlama3Json && !tagged_) || format_ == ToolFormat::kJson;
  std::optional<ParsedCall> call =
      ParseCall(std::string_view(pending_).substr(0, length), names_, need_args);
  Consume(length);
  if (!call) {
    GiveBack(out);
    return true;
  }
  if (parallel_ || calls_ == 0) {
    call->index = calls_++;
    out.calls.push_back(*std::move(call));
  }
  raw_.clear();
  space_.clear();
  state_ = State::kAfterObject;
  return true;
}

void ToolCallParser::StartArguments(ParseOutput& out, std::string name, size_t length) {
  pending_.erase(0, length);
  raw_.clear();
  out.calls.push_back({calls_++, std::move(name), "{"});
  depth_ = 1;  // inside the arguments' object
  in_string_ = escaped_ = false;
  state_ = State::kArguments;
}

bool ToolCallParser::StepCommitted(ParseOutput& out) {
  if (state_ == State::kCallEnd) return StepCallEnd();
  std::string piece;
  const bool arguments = state_ == State::kArguments;
  const size_t n = Scan(pending_, 0, std::numeric_limits<int>::max(), arguments ? &piece : nullptr);
  if (!arguments) raw_ += pending_.substr(0, n);  // given back if the object never closes
  pending_.erase(0, n);
  if (!piece.empty()) {
    const int index = calls_ - 1;
    if (out.calls.empty() || out.calls.back().index != index) out.calls.push_back({index, "", ""});
    out.calls.back().arguments += piece;
  }
  if (depth_ != 0) {                                             // all of pending_ scanned
    if (!arguments && raw_.size() > kMaxOpening) GiveBack(out);  // no call's keys run this long
    return false;
  }
  if (arguments) {
    state_ = State::kCallEnd;
    return true;
  }
  EndCall();
  return true;
}

bool ToolCallParser::StepCallEnd() {
  const size_t i = SkipSpace(pending_);
  if (i == pending_.size()) return false;
  if (pending_[i] == ',') {  // more keys: the object ends at its '}'
    raw_ = pending_.substr(0, i + 1);
    pending_.erase(0, i + 1);
    depth_ = 1;
    in_string_ = escaped_ = false;
    state_ = State::kCallRest;
    return true;
  }
  // '}' ends the object; anything else (an end tag, text) means the model left it open: the
  // call ends with its arguments, and what follows is read as after any call.
  if (pending_[i] == '}') pending_.erase(0, i + 1);
  EndCall();
  return true;
}

void ToolCallParser::EndCall() {
  raw_.clear();
  space_.clear();
  state_ = State::kAfterObject;
}

bool ToolCallParser::StepAfterObject() {
  const size_t i = SkipSpace(pending_);
  if (i == pending_.size()) return false;
  const std::string_view rest = std::string_view(pending_).substr(i);
  State next = format_ == ToolFormat::kJson && rest[0] == ']' ? State::kTail : TextAfterCalls();
  size_t used = i;
  if (format_ == ToolFormat::kHermes) {
    if (rest.starts_with(kHermesClose)) {
      used += kHermesClose.size();
    } else if (kHermesClose.starts_with(rest)) {
      return false;
    }
  } else if ((ListAfterMarker() || format_ == ToolFormat::kJson) &&
             (rest[0] == ',' || rest[0] == ']')) {
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
