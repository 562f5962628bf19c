// Reads tool calls back out of a model's streamed text, in one of the formats of
// tool_format.h. Pure logic, one per request; not thread-safe.
//
// Text outside calls passes through as content, held back only while it could be the start of
// the format's marker. A call is reported whole, once its JSON object is complete (the name
// and its arguments together). Text that looks like a call but is not one (malformed JSON, no
// "name", a name the request did not offer, arguments that are not an object; in llama3_json
// without <|python_tag|>, an object with neither "arguments" nor "parameters") is given back
// as content, unchanged, so nothing the model wrote is lost. Whitespace between calls is
// dropped.
#ifndef LLM_WORKER_TOOLS_TOOL_CALL_PARSER_H_
#define LLM_WORKER_TOOLS_TOOL_CALL_PARSER_H_

#include <string>
#include <string_view>
#include <vector>

#include "worker/tools/tool_format.h"

namespace llm::tools {

struct ParsedCall {
  std::string name;
  std::string arguments;  // a JSON object, compact; "{}" when the model gave none
};

struct ParseOutput {
  std::string content;
  std::vector<ParsedCall> calls;
};

class ToolCallParser {
 public:
  // `parallel` false: calls after the first are dropped (OpenAI's parallel_tool_calls).
  // `names`: the functions the request offers; a call of another name is text (empty: any).
  ToolCallParser(ToolFormat format, bool parallel, std::vector<std::string> names = {});

  // The content and calls that `text`, the output's next piece, completes.
  ParseOutput Feed(std::string_view text);
  // The end of the output: what was held back, as content or a last call.
  ParseOutput Finish();

  int calls() const { return calls_; }

 private:
  enum class State {
    kStart,         // llama3_json: before the first non-space byte
    kText,          // content; watching for the marker
    kBeforeList,    // mistral: after the marker, before '['
    kBeforeObject,  // before a call's '{'
    kObject,        // inside a call's JSON object
    kAfterObject,   // after a call: its end tag or the separator before the next
    kTail,          // content to the end, no more calls (llama3_json after text)
  };
  // One step over pending_; false when it needs more text.
  bool Step(ParseOutput& out);
  bool StepStart();
  bool StepText(ParseOutput& out);
  bool StepObject(ParseOutput& out);
  bool StepAfterObject();
  void Content(ParseOutput& out, std::string_view text);
  // Leaves the call region: what it consumed goes back to content.
  void GiveBack(ParseOutput& out);
  void Consume(size_t n);

  ToolFormat format_;
  bool parallel_;
  std::vector<std::string> names_;
  bool tagged_ = false;  // llama3_json: the answer began with <|python_tag|>
  State state_;
  std::string pending_;  // text not yet decided
  std::string raw_;      // the current call region's text, given back if it is not a call
  int calls_ = 0;
  // The JSON object scan: bytes of pending_ scanned, nesting depth, inside a string, after '\'.
  size_t scanned_ = 0;
  int depth_ = 0;
  std::string space_;  // whitespace after a call, held until text follows it
  bool in_string_ = false, escaped_ = false;
};

}  // namespace llm::tools

#endif  // LLM_WORKER_TOOLS_TOOL_CALL_PARSER_H_
