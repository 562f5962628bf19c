// Reads tool calls back out of a model's streamed text, in one of the formats of
// tool_format.h. Pure logic, one per request; not thread-safe.
//
// Text outside calls passes through as content, held back only while it could be the start of
// the format's marker.
//
// A call streams when its object opens as every format's calls do, and as a required call's
// grammar writes them: {"name": "<one of the request's functions>", "arguments" (or
// "parameters"): {. From there the call is committed: its first piece has the name and the
// arguments' text so far, and each later Feed adds a piece with what the arguments' object
// grew by, whitespace outside strings dropped, until it closes. A committed call is never
// given back: if the output ends inside it, its arguments are left as far as the model wrote
// them (OpenAI's own streams end so at max_tokens), and arguments that turn out malformed
// (tool_choice auto: no grammar holds the model) are passed on as written.
//
// Any other call is reported whole, once its JSON object is complete and checked (arguments
// given as a JSON string, or after other keys, or missing where the format allows it; the
// arguments then compact, as nlohmann writes them). Text that looks like a call but is not one
// (malformed JSON, no "name", a name the request did not offer, arguments that are not an
// object; in llama3_json without <|python_tag|>, and in json, an object with neither
// "arguments" nor "parameters") is given back as content, unchanged, so nothing the model wrote is
// lost. Whitespace between calls is dropped.
#ifndef LLM_WORKER_TOOLS_TOOL_CALL_PARSER_H_
#define LLM_WORKER_TOOLS_TOOL_CALL_PARSER_H_

#include <string>
#include <string_view>
#include <vector>

#include "worker/tools/tool_format.h"

namespace llm::tools {

// A call, or a piece of one.
struct ParsedCall {
  int index = 0;          // the call's position among the output's calls, from 0
  std::string name;       // on a call's first piece only: a later piece has none
  std::string arguments;  // a JSON object's text ("{}" when the model gave none), or a piece
                          // of it to append to the pieces before
};

struct ParseOutput {
  std::string content;
  std::vector<ParsedCall> calls;  // at most one piece per call
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
  // mistral and granite: the calls are a JSON list after the marker (granite: <|tool_call|>, or
  // <tool_call> as Granite 3.1 wrote it).
  bool ListAfterMarker() const {
    return format_ == ToolFormat::kMistral || format_ == ToolFormat::kGranite;
  }
  enum class State {
    kStart,         // llama3_json: before the first non-space byte
    kText,          // content; watching for the marker
    kBeforeList,    // mistral: after the marker, json: at the start; before '['
    kBeforeObject,  // before a call's '{'
    kObject,        // inside a call's JSON object, not yet committed
    kArguments,     // inside a committed call's arguments object
    kCallEnd,       // a committed call, just after its arguments: '}', ',' or its end
    kCallRest,      // a committed call's keys after its arguments: up to the object's '}'
    kAfterObject,   // after a call: its end tag or the separator before the next
    kTail,          // content to the end, no more calls (llama3_json after text)
  };
  // One step over pending_; false when it needs more text.
  bool Step(ParseOutput& out);
  bool StepStart();
  bool StepText(ParseOutput& out);
  bool StepObject(ParseOutput& out);
  // Commits the call whose object's opening (`length` bytes of pending_) names `name`.
  void StartArguments(ParseOutput& out, std::string name, size_t length);
  bool StepCommitted(ParseOutput& out);
  bool StepCallEnd();
  void EndCall();  // the call's object is over: what follows is read as after any call
  // Scans JSON text from `from` until the value open at depth_ closes, depth_ passes
  // `max_depth`, or `s` ends; returns where it stopped. Strings and escapes carry across calls.
  // `emit` (may be null) gets the bytes scanned less whitespace outside strings.
  size_t Scan(std::string_view s, size_t from, int max_depth, std::string* emit);
  bool StepAfterObject();
  // Where text goes when it is not (or no longer) a call: kText, or kTail for the formats
  // whose calls are the whole answer (llama3_json, json).
  State TextAfterCalls() const;
  void Content(ParseOutput& out, std::string_view text);
  // Leaves the call region: what it consumed goes back to content.
  void GiveBack(ParseOutput& out);
  void Consume(size_t n);

  ToolFormat format_;
  bool parallel_;
  std::vector<std::string> names_;
  bool tagged_ = false;  // llama3_json: the answer began with <|python_tag|>
  bool whole_ = false;   // the current call's object cannot stream: it is read whole
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
