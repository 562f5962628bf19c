// The tool-call formats of the chat templates we ship: how a model writes a call, which parser
// reads it back (tool_call_parser.h) and which grammar enforces it (tool_grammar.h).
//
//   llama3_json  Llama 3.1/3.2: the whole answer is {"name": ..., "parameters": {...}}, maybe
//                after <|python_tag|>; several calls are separated by ';'.
//   hermes       Hermes, Qwen 2.5/3: text, then <tool_call>\n{"name": ..., "arguments": {...}}
//                \n</tool_call> per call.
//   mistral      Mistral v0.3: text, then [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...].
//   granite      Granite 3.x: text, then <|tool_call|>[{"name": ..., "arguments": {...}}, ...]
//                (mistral's list behind another marker; <tool_call> as 3.1 wrote it is read too).
//   json         no template's own: the whole answer is a JSON array of calls,
//                [{"name": ..., "arguments": {...}}, ...]. What a required or named tool_choice
//                writes on a worker whose format is none; a worker set to it reads it under auto.
//   none         no parsing: the output is text.
#ifndef LLM_WORKER_TOOLS_TOOL_FORMAT_H_
#define LLM_WORKER_TOOLS_TOOL_FORMAT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace llm::tools {

enum class ToolFormat { kNone, kLlama3Json, kHermes, kMistral, kGranite, kJson };

// "llama3_json", "hermes", "mistral", "granite", "json" or "none".
std::string_view ToolFormatName(ToolFormat format);

// `name` as model.tool_call_parser writes it; "auto" picks the format of `template_source` (a
// chat template's text; never json, which no template writes). INVALID_ARGUMENT naming
// model.tool_call_parser otherwise.
absl::StatusOr<ToolFormat> ResolveToolFormat(std::string_view name,
                                             std::string_view template_source);

// The format a chat template writes assistant calls in, from its markers; kNone when it has
// none we parse.
ToolFormat DetectToolFormat(std::string_view template_source);

// What the client allows the model to do with its tools (OpenAI's tool_choice).
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kFunction };
  Mode mode = Mode::kAuto;
  std::string function;  // kFunction: the function's name
};

}  // namespace llm::tools

#endif  // LLM_WORKER_TOOLS_TOOL_FORMAT_H_
