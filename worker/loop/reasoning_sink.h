// A reasoning model's thinking kept apart from its answer for one chat request
// (tools/reasoning_parser.h): the stream's text split into StreamUpdate::reasoning and
// StreamUpdate::text before the tool-call parser reads the text, so a call written while
// thinking is not a call.
#ifndef LLM_WORKER_LOOP_REASONING_SINK_H_
#define LLM_WORKER_LOOP_REASONING_SINK_H_

#include <atomic>
#include <memory>
#include <optional>

#include "worker/loop/stream.h"
#include "worker/tools/reasoning_parser.h"

namespace llm::loop {

// Whether the rendered prompt opened a think block: set once the chat is rendered, read by the
// sink at the request's first update (which comes after).
struct ReasoningStart {
  std::atomic<bool> in_reasoning{false};
};

// Splits each update's text; forwards everything to `inner`.
class ReasoningSink : public StreamSink {
 public:
  ReasoningSink(std::shared_ptr<const ReasoningStart> start, std::shared_ptr<StreamSink> inner)
      : start_(std::move(start)), inner_(std::move(inner)) {}
  void OnUpdate(StreamUpdate update) override;
  void OnError(const absl::Status& status) override { inner_->OnError(status); }

 private:
  std::shared_ptr<const ReasoningStart> start_;
  std::optional<tools::ReasoningParser> parser_;  // made at the first update
  std::shared_ptr<StreamSink> inner_;
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_REASONING_SINK_H_
