// The stage after the engine: turns each request's sampled tokens into text (incremental
// detokenization), finds stop strings, and delivers StreamUpdates to the request's sink. It
// runs on its own threads (requests are sharded by key), so the engine thread only enqueues.
#ifndef LLM_WORKER_LOOP_OUTPUT_STAGE_H_
#define LLM_WORKER_LOOP_OUTPUT_STAGE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "worker/frontend/detokenizer.h"
#include "worker/frontend/stop_strings.h"
#include "worker/frontend/tokenizer.h"
#include "worker/loop/engine_loop.h"
#include "worker/loop/stream.h"

namespace llm::loop {

// Everything the stage needs to stream one request.
struct OutputContext {
  std::shared_ptr<StreamSink> sink;
  std::vector<int32_t> prompt_ids;
  std::vector<std::string> stop;
  bool include_stop_str = false;
  bool skip_special_tokens = true;
  bool include_prompt_ids = false;
  bool continuous_usage = false;
  int32_t num_top_logprobs = 0;
  bool want_logprobs = false;
  bool prompt_logprobs = false;  // the first update carries the prompt's (TokenEvent's)
  Clock::time_point arrival;
};

class OutputStage : public EngineEvents {
 public:
  // `abort` ends a request in the engine (called when a stop string is found).
  OutputStage(const frontend::Tokenizer& tokenizer, int num_threads,
              std::function<void(uint64_t)> abort, RequestObserver* observer);
  ~OutputStage() override;

  // Registers a request before the engine sees it.
  void Register(uint64_t key, OutputContext context);
  // Forgets a request (its client went away); later events for it are dropped. Returns through
  // `was_live` (asynchronously, on the stage thread) whether it was still streaming.
  void Cancel(uint64_t key, std::function<void(bool was_live)> done = nullptr);
  // Ends a request with an error (on the stage thread).
  void Fail(uint64_t key, const absl::Status& status);

  // EngineEvents.
  void OnAdmitted(const std::vector<uint64_t>& keys, Clock::time_point when) override;
  void OnTokens(std::vector<engine::TokenEvent>& events, Clock::time_point when) override;
  void OnFailed(const std::vector<uint64_t>& keys, const absl::Status& status) override;

 private:
  struct RequestState {
    OutputContext ctx;
    frontend::IncrementalDetokenizer detok;
    frontend::StopStringMatcher stops;
    int32_t generated = 0;
    bool sent_first = false;
    Clock::time_point admitted{};
    int32_t cached_prompt_tokens = 0;
    Clock::time_point first_token{};
    int32_t draft_tokens = 0;     // proposals verified for it (speculative decoding)
    int32_t accepted_tokens = 0;  // of which accepted
  };
  struct Registered {
    uint64_t key;
    OutputContext ctx;
  };
  struct Admitted {
    uint64_t key;
    Clock::time_point when;
  };
  // One request's tokens from one step (several when it verified proposals): one update.
  struct Tokens {
    std::vector<engine::TokenEvent> run;
    Clock::time_point when;
  };
  struct Cancelled {
    uint64_t key;
    std::function<void(bool)> done;
  };
  struct Failed {
    uint64_t key;
    absl::Status status;
  };
  using Item = std::variant<Registered, Admitted, Tokens, Cancelled, Failed>;

  struct Shard {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Item> items;
    bool stop = false;
    std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests;  // shard thread only
    std::thread thread;
  };

  Shard& ShardOf(uint64_t key) { return *shards_[key % shards_.size()]; }
  void Enqueue(uint64_t key, Item item);
  void Run(Shard& shard);
  void Handle(Shard& shard, Item& item);
  // Streams a run of one request's tokens as one update (or its last).
  void HandleTokens(Shard& shard, const std::vector<engine::TokenEvent>& run,
                    Clock::time_point when);
  // Adds one token to `u`; the reason it ends the request (kNone: it goes on). A stop string
  // found also aborts the request in the engine.
  sampling::FinishReason AddToken(RequestState& st, const engine::TokenEvent& e,
                                  Clock::time_point when, StreamUpdate& u);
  void Finish(Shard& shard, uint64_t key, RequestState& st, StreamUpdate& update,
              sampling::FinishReason reason, Clock::time_point when);
  // The usage so far (tokens, cache hits, time to first token, proposals).
  static void SetUsage(const RequestState& st, StreamUpdate& u);
  // The sampled token's and its alternatives' entries, as the next token of `detok`'s output
  // (before it is added).
  static TokenLogprobs Logprobs(const frontend::IncrementalDetokenizer& detok,
                                const sampling::SampledToken& sampled);
  // The prompt's logprobs (TokenEvent::prompt_logprobs), each token's text where it stands in
  // the prompt (special tokens with their own text).
  std::vector<TokenLogprobs> PromptLogprobs(
      const std::vector<sampling::SampledToken>& prompt) const;

  const frontend::Tokenizer& tokenizer_;
  std::function<void(uint64_t)> abort_;
  RequestObserver* observer_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_OUTPUT_STAGE_H_
