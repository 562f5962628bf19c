#include "worker/engine/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llm::engine {

absl::Status SchedulerConfig::Validate() const {
  auto positive = [](const char* field, int64_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, ": must be > 0, got ", v));
  };
  for (const absl::Status& st :
       {positive("max_slots", sizes.max_slots), positive("kv_blocks", sizes.kv_blocks),
        positive("block_tokens", sizes.block_tokens),
        positive("max_prefill_tokens", max_prefill_tokens)}) {
    if (!st.ok()) return st;
  }
  if (max_prefill_tokens_alone < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_prefill_tokens_alone: must be >= 0, got ", max_prefill_tokens_alone));
  }
  if (max_batch_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens: must be >= 0 (0: no cap), got ", max_batch_tokens));
  }
  if (max_batch_tokens > 0 && max_batch_tokens < sizes.max_slots + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens: ", max_batch_tokens, " leaves no room for prefill beside ",
                     sizes.max_slots, " decode tokens (max_slots); use at least max_slots + 1"));
  }
  return absl::OkStatus();
}

int32_t SchedulerConfig::PrefillBudget(int32_t decodes) const {
  const int32_t budget =
      decodes == 0 ? std::max(max_prefill_tokens, max_prefill_tokens_alone) : max_prefill_tokens;
  return max_batch_tokens > 0 ? std::min(budget, max_batch_tokens - decodes) : budget;
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      cache_(config.sizes.kv_blocks, config.sizes.block_tokens, config.prefix_cache,
             config.cache_salt),
      slots_(config.sizes.max_slots),
      policy_(config.speculative) {
  for (int32_t s = config.sizes.max_slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

int32_t Scheduler::PlanDecodes(StepPlan& plan) {
  auto decodes = [&](const Slot& slot) {
    return slot.phase == Phase::kDecode && slot.planned < slot.request->max_tokens;
  };
  int32_t decoding = 0;
  for (const Slot& slot : slots_) decoding += decodes(slot) ? 1 : 0;
  if (decoding == 0) return 0;
  // The policy learns what its choice gave, the cap below included.
  last_k_ = policy_.Choose(decoding);
  int32_t k = last_k_;
  // Proposals never take the prompt budget of a capped step.
  if (k > 0 && config_.max_batch_tokens > 0) {
    const int32_t room = config_.max_batch_tokens - config_.max_prefill_tokens - decoding;
    k = std::clamp(room / decoding, 0, k);
  }
  int32_t tokens = 0;
  for (int32_t s = 0; s < config_.sizes.max_slots; ++s) {
    Slot& slot = slots_[s];
    if (!decodes(slot)) continue;
    ++slot.planned;
    // Planned tokens are a lower bound of the generated ones: no proposal past max_tokens.
    // A constrained request does not speculate (its proposals would need its masks).
    const bool speculates = slot.request->speculate && slot.request->constraint == nullptr;
    const int32_t draft = speculates ? std::min(k, slot.request->max_tokens - slot.planned) : 0;
    plan.decodes.push_back(DecodeChunk{s, draft});
    tokens += 1 + draft;
  }
  return tokens;
}

void Scheduler::Add(RequestPtr request) {
  queued_prompt_tokens_ += static_cast<int64_t>(request->prompt_ids.size());
  const uint64_t key = request->key;
  queue_.push_back(std::move(request));
  queued_[key] = std::prev(queue_.end());
}

bool Scheduler::Abort(uint64_t key) {
  if (const auto q = queued_.find(key); q != queued_.end()) {
    queued_prompt_tokens_ -= static_cast<int64_t>((*q->second)->prompt_ids.size());
    queue_.erase(q->second);
    queued_.erase(q);
    return true;
  }
  const auto it = slot_of_.find(key);
  if (it == slot_of_.end()) return false;
  Slot& slot = slots_[it->second];
  if (slot.phase == Phase::kEnded) return false;
  slot.phase = Phase::kEnded;
  return true;
}

std::vector<uint64_t> Scheduler::AbortAll() {
  std::vector<uint64_t> keys;
  for (const RequestPtr& r : queue_) keys.push_back(r->key);
  queue_.clear();
  queued_.clear();
  queued_prompt_tokens_ = 0;
  for (Slot& slot : slots_) {
    if (slot.phase == Phase::kFree || slot.phase == Phase::kEnded) continue;
    keys.push_back(slot.request->key);
    slot.phase = Phase::kEnded;
  }
  return keys;
}

int32_t Scheduler::PlanPrefill(int32_t s, int32_t budget, StepPlan& plan) {
  Slot& slot = slots_[s];
  const auto prompt = static_cast<int32_t>(slot.request->prompt_ids.size());
  const int32_t n = std::min(budget, prompt - slot.prefilled);
  if (n <= 0) return 0;
  const bool last = slot.prefilled + n == prompt;
  plan.prefills.push_back(PrefillChunk{s, slot.prefilled, n, last});
  slot.prefilled += n;
  slot.full_blocks = std::min(slot.prefilled / config_.sizes.block_tokens,
                              static_cast<int32_t>(slot.hashes.size()));
  if (last) {
    slot.phase = Phase::kDecode;
    slot.planned = 1;
  }
  return n;
}

void Scheduler::RegisterBlocks(Slot& slot) {
  const int32_t bt = config_.sizes.block_tokens;
  for (; slot.registered < slot.full_blocks; ++slot.registered) {
    const int32_t b = slot.registered;
    cache_.Insert(slot.blocks[static_cast<size_t>(b)], slot.hashes[static_cast<size_t>(b)],
                  b > 0 ? slot.hashes[static_cast<size_t>(b - 1)] : 0,
                  std::span<const int32_t>(slot.request->prompt_ids)
                      .subspan(static_cast<size_t>(b * bt), static_cast<size_t>(bt)));
  }
}

void Scheduler::RegisterOutputBlocks(const Slot& slot) {
  if (slot.outputs.size() < 2) return;
  // The prompt's blocks were all registered once its last chunk was planned (before any output).
  if (slot.registered != static_cast<int32_t>(slot.hashes.size())) return;
  const int32_t bt = config_.sizes.block_tokens;
  const std::vector<int32_t>& prompt = slot.request->prompt_ids;
  // Positions whose K/V is final: the prompt and every output but the last.
  const size_t written = prompt.size() + slot.outputs.size() - 1;
  const auto full = static_cast<int32_t>(written / static_cast<size_t>(bt));
  const int32_t first = slot.registered;  // the first block past the prompt's full blocks
  if (full <= first) return;
  // The new blocks' tokens (the prompt's tail, then outputs), hashed on from the prompt's chain.
  const size_t begin = static_cast<size_t>(first) * bt, end = static_cast<size_t>(full) * bt;
  std::vector<int32_t> tokens(prompt.begin() + static_cast<std::ptrdiff_t>(begin), prompt.end());
  tokens.insert(tokens.end(), slot.outputs.begin(),
                slot.outputs.begin() + static_cast<std::ptrdiff_t>(end - prompt.size()));
  uint64_t parent = first > 0 ? slot.hashes[static_cast<size_t>(first - 1)] : 0;
  const std::vector<uint64_t> hashes = cache_.ChainHashes(tokens, full - first, parent);
  for (int32_t b = first; b < full; ++b) {
    const auto i = static_cast<size_t>(b - first);
    cache_.Insert(slot.blocks[static_cast<size_t>(b)], hashes[i], parent,
                  std::span<const int32_t>(tokens).subspan(i * bt, static_cast<size_t>(bt)));
    parent = hashes[i];
  }
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  plan.step_id = ++step_id_;

  // 0. Prompt blocks written by earlier steps become reusable (this step runs after them).
  for (Slot& slot : slots_) {
    if (slot.phase != Phase::kFree) RegisterBlocks(slot);
  }

  // 1. Retire slots whose request ended.
  bool retired = false;
  for (int32_t s = 0; s < config_.sizes.max_slots; ++s) {
    Slot& slot = slots_[s];
    if (slot.phase != Phase::kEnded) continue;
    RegisterOutputBlocks(slot);
    cache_.Release(slot.blocks);
    slot_of_.erase(slot.request->key);
    slot = Slot{};
    free_slots_.push_back(s);
    unsent_releases_.push_back(s);
    --running_;
    retired = true;
  }
  if (retired) {
    // Keep the lowest free index on top so slot use stays compact.
    std::sort(free_slots_.begin(), free_slots_.end(), std::greater<>());
    prefill_order_.erase(std::remove_if(prefill_order_.begin(), prefill_order_.end(),
                                        [&](int32_t s) { return slots_[s].phase == Phase::kFree; }),
                         prefill_order_.end());
  }

  // 2. One decode chunk for every slot past its prompt that may still generate: its last
  // token, and the proposals the speculation policy allows.
  const int32_t decode_tokens = PlanDecodes(plan);

  // 3. Continue prompts, oldest admission first, within the prefill budget: the longer one
  // when nothing decodes in this step (no stream waits on it).
  int32_t budget = config_.PrefillBudget(decode_tokens);
  for (int32_t s : prefill_order_) {
    if (budget <= 0) break;
    if (slots_[s].phase == Phase::kPrefill) budget -= PlanPrefill(s, budget, plan);
  }
  prefill_order_.erase(
      std::remove_if(prefill_order_.begin(), prefill_order_.end(),
                     [&](int32_t s) { return slots_[s].phase != Phase::kPrefill; }),
      prefill_order_.end());

  // 4. Admit queued requests, first come first served: the head waits for room rather than
  // being overtaken, so a large request is never starved.
  const int32_t bt = config_.sizes.block_tokens;
  while (budget > 0 && !free_slots_.empty() && !queue_.empty()) {
    const RequestPtr& head = queue_.front();
    const std::span<const int32_t> prompt(head->prompt_ids);
    const auto prompt_len = static_cast<int32_t>(prompt.size());
    // The longest cached prefix of whole blocks, leaving at least one prompt token to compute
    // (its logits give the first output token).
    std::vector<uint64_t> hashes = cache_.ChainHashes(prompt, prompt_len / bt);
    const size_t matchable = std::min(hashes.size(), static_cast<size_t>((prompt_len - 1) / bt));
    std::vector<int32_t> blocks =
        cache_.Match(std::span<const uint64_t>(hashes).first(matchable), prompt);
    const int32_t need = BlocksFor(head->total_tokens(), bt) - static_cast<int32_t>(blocks.size());
    // Matched blocks nobody holds are counted as evictable room; once taken they are not.
    if (need > cache_.available() - cache_.CountUnreferenced(blocks)) break;
    cache_.Acquire(blocks);
    auto fresh = cache_.Allocate(need);
    blocks.insert(blocks.end(), fresh->begin(), fresh->end());
    const auto cached = static_cast<int32_t>(blocks.size() - fresh->size());
    cache_.RecordLookup(prompt_len, static_cast<int64_t>(cached) * bt);
    const int32_t s = free_slots_.back();
    free_slots_.pop_back();
    Slot& slot = slots_[s];
    slot = Slot{Phase::kPrefill, head, std::move(blocks), cached * bt, 0, plan.step_id};
    slot.hashes = std::move(hashes);
    slot.cached_tokens = cached * bt;
    slot.full_blocks = cached;
    slot.registered = cached;
    slot_of_[head->key] = s;
    ++running_;
    queued_prompt_tokens_ -= static_cast<int64_t>(head->prompt_ids.size());
    queued_.erase(head->key);
    plan.admissions.push_back(SlotAdmission{s, head, slot.blocks});
    queue_.pop_front();
    budget -= PlanPrefill(s, budget, plan);
    if (slot.phase == Phase::kPrefill) prefill_order_.push_back(s);
  }

  // 5. Releases go out with a plan that computes something (one that does not is not launched).
  if (!plan.empty()) {
    plan.releases.swap(unsent_releases_);
    if (config_.speculative.enabled()) {
      planned_steps_.push_back(PlannedStep{plan.step_id, static_cast<int32_t>(plan.decodes.size()),
                                           last_k_, !plan.prefills.empty()});
    }
  }
  return plan;
}

void Scheduler::ObserveStep(const StepResult& result) {
  while (!planned_steps_.empty() && planned_steps_.front().step_id < result.step_id) {
    planned_steps_.pop_front();  // a plan whose result never came (a failed launch)
  }
  if (planned_steps_.empty() || planned_steps_.front().step_id != result.step_id) return;
  const PlannedStep step = planned_steps_.front();
  planned_steps_.pop_front();
  if (step.prompt || step.decoding == 0) return;
  policy_.Observe(step.decoding, step.k, static_cast<int32_t>(result.outputs.size()),
                  result.device_seconds);
}

void Scheduler::Update(const StepResult& result, std::vector<TokenEvent>& events) {
  ObserveStep(result);
  for (const SlotOutput& out : result.outputs) {
    if (out.slot < 0 || out.slot >= config_.sizes.max_slots) continue;
    Slot& slot = slots_[out.slot];
    if (slot.phase == Phase::kFree || slot.phase == Phase::kEnded ||
        slot.request->key != out.request_key) {
      continue;  // the extra step of an ended request, or a slot that changed hands
    }
    if (out.finish != sampling::FinishReason::kNone) slot.phase = Phase::kEnded;
    if (cache_.enabled()) slot.outputs.push_back(out.sampled.token_id);
    events.push_back(TokenEvent{out.request_key, out.sampled, out.finish,
                                slot.emitted ? -1 : slot.cached_tokens, out.draft_tokens,
                                out.accepted_tokens});
    slot.emitted = true;
  }
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.queued_requests = static_cast<int32_t>(queue_.size());
  s.queued_prompt_tokens = queued_prompt_tokens_;
  s.running_requests = running_;
  s.free_slots = static_cast<int32_t>(free_slots_.size());
  s.max_slots = config_.sizes.max_slots;
  s.kv_blocks_total = cache_.num_blocks();
  s.kv_blocks_used = cache_.num_referenced();
  const PrefixCacheStats c = cache_.stats();
  s.kv_blocks_cached = c.cached_blocks;
  s.kv_blocks_evictable = c.evictable_blocks;
  s.kv_blocks_free = cache_.num_free();
  s.prefix_query_tokens = c.query_tokens;
  s.prefix_hit_tokens = c.hit_tokens;
  s.draft_tokens_per_slot = last_k_;
  return s;
}

}  // namespace llm::engine
