#include "worker/loop/reasoning_sink.h"

#include <utility>

namespace llm::loop {

void ReasoningSink::OnUpdate(StreamUpdate update) {
  if (!parser_) parser_.emplace(start_->in_reasoning.load());
  tools::ReasoningOutput out = parser_->Feed(update.text);
  if (update.finished) {
    tools::ReasoningOutput last = parser_->Finish();
    out.reasoning += last.reasoning;
    out.content += last.content;
  }
  update.text = std::move(out.content);
  update.reasoning = std::move(out.reasoning);
  inner_->OnUpdate(std::move(update));
}

}  // namespace llm::loop
