#include "worker/loop/stream.h"

namespace llm::loop {

void StreamUpdate::Merge(StreamUpdate&& next) {
  text += next.text;
  reasoning += next.reasoning;
  token_ids.insert(token_ids.end(), next.token_ids.begin(), next.token_ids.end());
  for (auto& lp : next.logprobs) logprobs.push_back(std::move(lp));
  if (prompt_ids.empty()) prompt_ids = std::move(next.prompt_ids);
  if (prompt_logprobs.empty()) prompt_logprobs = std::move(next.prompt_logprobs);
  finished = next.finished;
  reason = next.reason;
  if (!next.stop_string.empty()) stop_string = std::move(next.stop_string);
  if (next.stop_token_id >= 0) stop_token_id = next.stop_token_id;
  for (auto& c : next.tool_calls) {
    if (c.id.empty() && !tool_calls.empty() && tool_calls.back().index == c.index) {
      tool_calls.back().arguments += c.arguments;  // the same call's next piece
    } else {
      tool_calls.push_back(std::move(c));
    }
  }
  called_tools = called_tools || next.called_tools;
  if (next.has_usage) {
    has_usage = true;
    usage = next.usage;
  }
}

}  // namespace llm::loop
