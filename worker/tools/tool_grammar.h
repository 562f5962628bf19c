// The tools a client offers, checked, and the grammar (the patterns of a pushdown automaton:
// byte_regex.h, pushdown.h) of an answer that calls them in the model's own format
// (tool_format.h): what tool_choice "required" or a named function enforces. Pure logic.
#ifndef LLM_WORKER_TOOLS_TOOL_GRAMMAR_H_
#define LLM_WORKER_TOOLS_TOOL_GRAMMAR_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/constraint/pushdown.h"
#include "worker/tools/tool_format.h"

namespace llm::tools {

// Function names: OpenAI's rule, 1..64 of a-z A-Z 0-9 _ -.
inline constexpr size_t kMaxFunctionName = 64;

struct Tool {
  std::string name;
  // The JSON Schema of the arguments; null when the tool takes none (arguments are {}).
  nlohmann::ordered_json parameters;
};

// `tools` in OpenAI's shape: [{"type": "function", "function": {"name", "description"?,
// "parameters"?, "strict"?}}]. INVALID_ARGUMENT naming the field ("tools[1].function.name")
// for anything else, and for a name used twice.
absl::StatusOr<std::vector<Tool>> ParseTools(const nlohmann::ordered_json& tools);

// INVALID_ARGUMENT naming tool_choice when it names a function that is not among `tools`, or
// requires a call with no tools.
absl::Status CheckToolChoice(const std::vector<Tool>& tools, const ToolChoice& choice);

// The regex of a format's marker ("[TOOL_CALLS]", "<tool_call>", "</tool_call>"): the text
// itself, or where the model's tokenizer has the marker as a special token, that token alone
// (constraint::SpecialTokenBytes), as the model was trained to write it.
using MarkerRegex = std::function<std::string(std::string_view marker)>;

// The patterns of an answer that is nothing but calls in `format`: of `choice`'s function, or
// of any tool when it is kRequired; exactly one call unless `parallel` (llama3_json: always
// one). Arguments are compact JSON valid under the tool's parameters (json_schema.h; a
// recursive schema's rules, named "tools[0].function.parameters#/$defs/Node", follow the
// root's, so trees nest as deep as the output goes); a schema that does not compile is
// INVALID_ARGUMENT naming it ("tools[0].function.parameters.properties.x"). `marker` null:
// markers as text.
absl::StatusOr<constraint::RulePatterns> ToolCallPatterns(ToolFormat format,
                                                          const std::vector<Tool>& tools,
                                                          const ToolChoice& choice, bool parallel,
                                                          const MarkerRegex& marker = nullptr);

}  // namespace llm::tools

#endif  // LLM_WORKER_TOOLS_TOOL_GRAMMAR_H_
