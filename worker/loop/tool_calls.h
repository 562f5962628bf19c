// Tool calling for one chat request (worker/tools): the grammar tool_choice enforces, and a
// sink that turns the model's call text into StreamUpdate::tool_calls.
//
// With tools and a tool_choice other than "none", and a format to read calls in:
//   - "required" or a named function become the request's constraint (the calls' grammar in
//     the model's own format, or where the worker has none, tool_format.h's json: a JSON array
//     of calls), so the answer is nothing but valid calls; a marker that the
//     tokenizer has as a special token is that token in the grammar, not its text spelled in
//     ordinary tokens;
//   - the output's text keeps special tokens (the formats' markers, <|python_tag|> or
//     [TOOL_CALLS], may be special tokens), and the parser takes the markers out;
//   - the stream's text is the content outside calls; a call comes as the parser reads it
//     (tool_call_parser.h): its first piece with an id and its name, later pieces with more of
//     its arguments, or whole in one piece; the last update says whether there were calls
//     (finish_reason tool_calls).
#ifndef LLM_WORKER_LOOP_TOOL_CALLS_H_
#define LLM_WORKER_LOOP_TOOL_CALLS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/frontend/tokenizer.h"
#include "worker/loop/request_spec.h"
#include "worker/loop/stream.h"
#include "worker/tools/tool_call_parser.h"
#include "worker/tools/tool_format.h"

namespace llm::loop {

// Prepares `spec` (a chat request) for its tools under `format`, wrapping `sink` in the parser.
// INVALID_ARGUMENT naming the field for bad tools, a tool_choice they cannot meet, a
// required call together with another constraint or ignore_eos, or tool_choice auto on a
// worker with no format to read calls in. `tokenizer` (may be null: markers as text) is the
// model's.
absl::Status PrepareToolCalls(tools::ToolFormat format, const frontend::Tokenizer* tokenizer,
                              GenerateSpec& spec, std::shared_ptr<StreamSink>& sink);

// Reads calls out of a stream's text; forwards everything else to `inner` unchanged.
class ToolCallSink : public StreamSink {
 public:
  // `names`: the request's functions (a call of another name is text; empty: any).
  ToolCallSink(tools::ToolFormat format, bool parallel, std::vector<std::string> names,
               std::shared_ptr<StreamSink> inner);
  void OnUpdate(StreamUpdate update) override;
  void OnError(const absl::Status& status) override { inner_->OnError(status); }

 private:
  std::string NewId();

  tools::ToolFormat format_;
  tools::ToolCallParser parser_;
  std::shared_ptr<StreamSink> inner_;
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_TOOL_CALLS_H_
