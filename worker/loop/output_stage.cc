#include "worker/loop/output_stage.h"

#include <algorithm>

#include "common/thread_name.h"
#include "common/utf8.h"

namespace llm::loop {
namespace {

using sampling::FinishReason;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Sec(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

OutputStage::OutputStage(const frontend::Tokenizer& tokenizer, int num_threads,
                         std::function<void(uint64_t)> abort, RequestObserver* observer)
    : tokenizer_(tokenizer), abort_(std::move(abort)), observer_(observer) {
  for (int i = 0; i < std::max(1, num_threads); ++i) {
    shards_.push_back(std::make_unique<Shard>());
  }
  for (auto& s : shards_) {
    Shard* shard = s.get();
    const std::string name = "output-" + std::to_string(&s - &shards_[0]);
    shard->thread = std::thread([this, shard, name] {
      SetCurrentThreadName(name);
      Run(*shard);
    });
  }
}

OutputStage::~OutputStage() {
  for (auto& s : shards_) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->stop = true;
    }
    s->cv.notify_all();
  }
  for (auto& s : shards_) s->thread.join();
}

void OutputStage::Enqueue(uint64_t key, Item item) {
  Shard& shard = ShardOf(key);
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    shard.items.push_back(std::move(item));
  }
  shard.cv.notify_one();
}

void OutputStage::Register(uint64_t key, OutputContext context) {
  Enqueue(key, Registered{key, std::move(context)});
}

void OutputStage::Cancel(uint64_t key, std::function<void(bool)> done) {
  Enqueue(key, Cancelled{key, std::move(done)});
}

void OutputStage::Fail(uint64_t key, const absl::Status& status) {
  Enqueue(key, Failed{key, status});
}

void OutputStage::OnAdmitted(const std::vector<uint64_t>& keys, Clock::time_point when) {
  for (uint64_t key : keys) Enqueue(key, Admitted{key, when});
}

void OutputStage::OnTokens(std::vector<engine::TokenEvent>& events, Clock::time_point when) {
  // One lock per shard per step rather than per token.
  for (auto& shard : shards_) {
    bool any = false;
    {
      std::lock_guard<std::mutex> lock(shard->mu);
      // A request's outputs of one step are consecutive (a verified run): one item, one update.
      for (size_t i = 0; i < events.size();) {
        size_t end = i + 1;
        while (end < events.size() && events[end].request_key == events[i].request_key) ++end;
        if (&ShardOf(events[i].request_key) == shard.get()) {
          Tokens t{{}, when};
          t.run.assign(std::make_move_iterator(events.begin() + static_cast<std::ptrdiff_t>(i)),
                       std::make_move_iterator(events.begin() + static_cast<std::ptrdiff_t>(end)));
          shard->items.push_back(std::move(t));
          any = true;
        }
        i = end;
      }
    }
    if (any) shard->cv.notify_one();
  }
}

void OutputStage::OnFailed(const std::vector<uint64_t>& keys, const absl::Status& status) {
  for (uint64_t key : keys) Fail(key, status);
}

void OutputStage::Run(Shard& shard) {
  std::deque<Item> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(shard.mu);
      shard.cv.wait(lock, [&] { return shard.stop || !shard.items.empty(); });
      if (shard.stop && shard.items.empty()) return;
      batch.swap(shard.items);
    }
    for (Item& item : batch) Handle(shard, item);
    batch.clear();
  }
}

void OutputStage::Handle(Shard& shard, Item& item) {
  if (auto* r = std::get_if<Registered>(&item)) {
    auto st = std::make_unique<RequestState>(RequestState{
        r->ctx,
        frontend::IncrementalDetokenizer(tokenizer_, r->ctx.prompt_ids, r->ctx.skip_special_tokens),
        frontend::StopStringMatcher(r->ctx.stop, r->ctx.include_stop_str)});
    shard.requests[r->key] = std::move(st);
  } else if (auto* a = std::get_if<Admitted>(&item)) {
    if (auto it = shard.requests.find(a->key); it != shard.requests.end()) {
      it->second->admitted = a->when;
    }
  } else if (auto* t = std::get_if<Tokens>(&item)) {
    HandleTokens(shard, t->run, t->when);
  } else if (auto* c = std::get_if<Cancelled>(&item)) {
    const bool live = shard.requests.erase(c->key) > 0;
    if (live && observer_ != nullptr) observer_->OnRequestCancelled();
    if (c->done) c->done(live);
  } else if (auto* f = std::get_if<Failed>(&item)) {
    const auto it = shard.requests.find(f->key);
    if (it == shard.requests.end()) return;
    std::shared_ptr<StreamSink> sink = it->second->ctx.sink;
    RequestStats stats;
    stats.prompt_tokens = static_cast<int32_t>(it->second->ctx.prompt_ids.size());
    stats.completion_tokens = it->second->generated;
    stats.e2e_seconds = Sec(Clock::now() - it->second->ctx.arrival);
    stats.reason = FinishReason::kError;
    shard.requests.erase(it);
    if (observer_ != nullptr) observer_->OnRequestFinished(stats);
    sink->OnError(f->status);
  }
}

TokenLogprobs OutputStage::Logprobs(const frontend::IncrementalDetokenizer& detok,
                                    const sampling::SampledToken& s) {
  // In context: decoded alone, a word's token lost its leading space (decoders strip it at the
  // start of a text), and part of a character was only U+FFFD's bytes.
  std::vector<int32_t> ids = {s.token_id};
  for (const auto& t : s.top) ids.push_back(t.token_id);
  std::vector<std::string> bytes = detok.BytesOf(ids);
  const auto entry = [&](size_t i, float logprob) {
    std::string text = Utf8Lossy(bytes[i]);
    return LogprobEntry{ids[i], logprob, std::move(text), std::move(bytes[i])};
  };
  TokenLogprobs lp{entry(0, s.logprob), {}};
  lp.sampled.rank = s.rank;
  for (size_t i = 0; i < s.top.size(); ++i) lp.top.push_back(entry(i + 1, s.top[i].logprob));
  return lp;
}

std::vector<TokenLogprobs> OutputStage::PromptLogprobs(
    const std::vector<sampling::SampledToken>& prompt) const {
  // Each token's bytes in the context of the few before it, as the output's tokens get theirs
  // (a fresh detokenizer per token: one carried along would widen its window without bound
  // over tokens that never complete a character). Special tokens keep their text.
  std::vector<int32_t> ids;
  ids.reserve(prompt.size());
  for (const sampling::SampledToken& s : prompt) ids.push_back(s.token_id);
  std::vector<TokenLogprobs> out;
  out.reserve(prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) {
    const frontend::IncrementalDetokenizer before(
        tokenizer_, std::span<const int32_t>(ids).first(i), /*skip_special_tokens=*/false);
    out.push_back(Logprobs(before, prompt[i]));
  }
  return out;
}

FinishReason OutputStage::AddToken(RequestState& st, const engine::TokenEvent& e,
                                   Clock::time_point when, StreamUpdate& u) {
  if (st.generated++ == 0) st.first_token = when;
  if (e.cached_prompt_tokens >= 0) st.cached_prompt_tokens = e.cached_prompt_tokens;
  st.draft_tokens += e.draft_tokens;
  st.accepted_tokens += e.accepted_tokens;
  const int32_t token = e.sampled.token_id;
  u.token_ids.push_back(token);
  if (st.ctx.want_logprobs) u.logprobs.push_back(Logprobs(st.detok, e.sampled));
  if (e.finish == FinishReason::kStopToken) {
    // A stop token (EOS included) ends generation and is not part of the text.
    u.stop_token_id = token;
    return FinishReason::kStopToken;
  }
  auto r = st.stops.Add(st.detok.Add(token));
  u.text += r.text;
  if (r.stopped) {
    u.stop_string = std::move(r.matched);
    abort_(e.request_key);  // free the slot now rather than at max_tokens
    return FinishReason::kStopString;
  }
  return e.finish == FinishReason::kLength ? FinishReason::kLength : FinishReason::kNone;
}

void OutputStage::HandleTokens(Shard& shard, const std::vector<engine::TokenEvent>& run,
                               Clock::time_point when) {
  const uint64_t key = run.front().request_key;
  const auto it = shard.requests.find(key);
  if (it == shard.requests.end()) return;  // cancelled, or ended by a stop string
  RequestState& st = *it->second;
  StreamUpdate u;
  if (!st.sent_first && st.ctx.include_prompt_ids) u.prompt_ids = st.ctx.prompt_ids;
  // Once: a request readmitted after a preemption computes them again.
  if (!st.sent_first && st.ctx.prompt_logprobs) {
    u.prompt_logprobs = PromptLogprobs(run.front().prompt_logprobs);
  }
  st.sent_first = true;
  for (const engine::TokenEvent& e : run) {
    // Tokens after the one that ends the request (a stop string inside an accepted run) are
    // not part of the output, as they would not have been generated without speculation.
    const FinishReason reason = AddToken(st, e, when, u);
    if (reason != FinishReason::kNone) return Finish(shard, key, st, u, reason, when);
  }
  if (st.ctx.continuous_usage) SetUsage(st, u);
  st.ctx.sink->OnUpdate(std::move(u));
}

void OutputStage::SetUsage(const RequestState& st, StreamUpdate& u) {
  u.has_usage = true;
  u.usage.prompt_tokens = static_cast<int32_t>(st.ctx.prompt_ids.size());
  u.usage.cached_prompt_tokens = st.cached_prompt_tokens;
  u.usage.completion_tokens = st.generated;
  u.usage.time_to_first_token_ms = Ms(st.first_token - st.ctx.arrival);
  u.usage.draft_tokens = st.draft_tokens;
  u.usage.accepted_draft_tokens = st.accepted_tokens;
}

void OutputStage::Finish(Shard& shard, uint64_t key, RequestState& st, StreamUpdate& u,
                         FinishReason reason, Clock::time_point when) {
  if (u.stop_string.empty()) {
    // Text held back (a partial character, a possible stop-string prefix) is complete now.
    auto r = st.stops.Add(st.detok.Flush());
    u.text += r.text;
    if (r.stopped) {
      reason = FinishReason::kStopString;
      u.stop_string = r.matched;
      u.stop_token_id = -1;
    } else {
      u.text += st.stops.Flush();
    }
  }
  u.finished = true;
  u.reason = reason;
  SetUsage(st, u);
  u.usage.queue_time_ms =
      st.admitted == Clock::time_point{} ? 0.0 : Ms(st.admitted - st.ctx.arrival);
  u.usage.total_time_ms = Ms(when - st.ctx.arrival);
  if (observer_ != nullptr) {
    RequestStats s;
    s.prompt_tokens = u.usage.prompt_tokens;
    s.completion_tokens = st.generated;
    s.ttft_seconds = Sec(st.first_token - st.ctx.arrival);
    s.tpot_seconds = st.generated > 1 ? Sec(when - st.first_token) / (st.generated - 1) : -1;
    s.e2e_seconds = Sec(when - st.ctx.arrival);
    s.queue_seconds = u.usage.queue_time_ms / 1e3;
    s.reason = reason;
    observer_->OnRequestFinished(s);
  }
  std::shared_ptr<StreamSink> sink = st.ctx.sink;
  shard.requests.erase(key);  // `st` is gone from here on
  sink->OnUpdate(std::move(u));
}

}  // namespace llm::loop
