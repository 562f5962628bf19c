// What a request's caller receives: the stream of updates of one generation. Worker-level
// types; the gRPC server maps them to llm.v1 messages, in-process callers use them directly.
#ifndef LLM_WORKER_LOOP_STREAM_H_
#define LLM_WORKER_LOOP_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/finish_reason.h"

namespace llm::loop {

// A token of a logprob report, as it reads where it stands in the output: `bytes` its share of
// the output's UTF-8 (possibly part of a character), `text` those bytes repaired (U+FFFD).
struct LogprobEntry {
  int32_t token_id;
  float logprob;
  std::string text;
  std::string bytes;
  int32_t rank = 0;  // a prompt token's (sampling::SampledToken::rank); 0: not computed
};

struct TokenLogprobs {
  LogprobEntry sampled;
  std::vector<LogprobEntry> top;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // of prompt_tokens, found in the prefix cache
  int32_t completion_tokens = 0;
  double time_to_first_token_ms = 0;
  double queue_time_ms = 0;
  double total_time_ms = 0;
  // Speculative decoding: proposals verified for the request, and how many of them stood.
  int32_t draft_tokens = 0;
  int32_t accepted_draft_tokens = 0;
};

// A tool call read out of the output (worker/tools), or a piece of one. A call's first piece
// has its id and name; a later piece (same index, no id, no name) carries more of its
// arguments, to append. A call read whole is one piece.
struct ToolCall {
  int index = 0;  // its position among the request's calls, from 0
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text, or the next piece of it
};

struct StreamUpdate {
  std::string text;  // new text since the previous update (outside calls)
  // New reasoning since the previous update: the model's thinking, kept out of `text`
  // (reasoning_sink.h; chat requests on a worker with a reasoning format).
  std::string reasoning;
  std::vector<int32_t> token_ids;       // new tokens since the previous update
  std::vector<TokenLogprobs> logprobs;  // one per token when asked for
  std::vector<int32_t> prompt_ids;      // first update, when asked for
  // First update, when asked for: one per prompt token (the first with logprob 0, no top).
  std::vector<TokenLogprobs> prompt_logprobs;
  bool finished = false;
  sampling::FinishReason reason = sampling::FinishReason::kNone;
  std::string stop_string;     // when a stop string ended generation
  int32_t stop_token_id = -1;  // when a stop token (EOS included) ended it
  bool has_usage = false;
  Usage usage;
  std::vector<ToolCall> tool_calls;  // calls, or pieces of them, since the previous update
  bool called_tools = false;         // last update: the output held calls

  // Appends `next` (a later update) to this one, for a reader that fell behind; a call's
  // pieces join.
  void Merge(StreamUpdate&& next);
};

// Receives one request's stream. Calls come from one output-stage thread at a time, in order,
// and must not block (queue and return). After an update with finished = true, or OnError, no
// further call is made.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  virtual void OnUpdate(StreamUpdate update) = 0;
  // The request failed (for example, its prompt turned out too long after tokenization).
  virtual void OnError(const absl::Status& status) = 0;
};

// Request-level outcomes, for metrics.
struct RequestStats {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double ttft_seconds = -1;  // negative when no token was produced
  double tpot_seconds = -1;  // mean time per output token after the first; negative if < 2
  double e2e_seconds = 0;
  double queue_seconds = -1;
  sampling::FinishReason reason = sampling::FinishReason::kNone;
};

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  virtual void OnRequestFinished(const RequestStats& stats) = 0;  // stop, length or error
  virtual void OnRequestCancelled() = 0;
  // Refused after Submit returned but before it started: a text prompt that does not tokenize
  // or render, or whose tokens break a limit, or a worker shutting down. (What Submit itself
  // refuses, its caller counts.)
  virtual void OnRequestRejected(absl::StatusCode /*code*/) {}
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_STREAM_H_
