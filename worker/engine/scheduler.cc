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
  if (max_prompt_logprob_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_prompt_logprob_rows: must be >= 1, got ", max_prompt_logprob_rows));
  }
  if (max_prefill_tokens_alone < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_prefill_tokens_alone: must be >= 0, got ", max_prefill_tokens_alone));
  }
  if (!(max_decode_slowdown == 0.0 || max_decode_slowdown > 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_decode_slowdown: must be 0 (off) or more than 1, got ", max_decode_slowdown));
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

std::string SchedulerConfig::DescribeKvPolicy() const {
  if (!kv_on_demand) {
    return "reserved at admission for prompt + max_tokens (no preemption)";
  }
  return "on demand: admission takes the prompt's blocks and one decode's, keeping one free "
         "block per running request; when a step's blocks run out the newest request is "
         "preempted and resumes later";
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      cache_(config.sizes.kv_blocks, config.sizes.block_tokens, config.prefix_cache,
             config.cache_salt),
      slots_(config.sizes.max_slots),
      policy_(config.speculative),
      pacer_(config.max_decode_slowdown) {
  for (int32_t s = config.sizes.max_slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

std::span<const int32_t> Scheduler::Prefix(const Slot& slot) {
  return slot.prefix.empty() ? std::span<const int32_t>(slot.request->prompt_ids)
                             : std::span<const int32_t>(slot.prefix);
}

bool Scheduler::Grow(int32_t s, int32_t tokens, int32_t keep_free, StepPlan& plan) {
  Slot& slot = slots_[s];
  const int32_t need =
      BlocksFor(tokens, config_.sizes.block_tokens) - static_cast<int32_t>(slot.blocks.size());
  if (need <= 0) return true;
  if (need > cache_.available() - keep_free) return false;
  const std::vector<int32_t> fresh = *cache_.Allocate(need);
  slot.blocks.insert(slot.blocks.end(), fresh.begin(), fresh.end());
  auto grant = std::find_if(plan.grants.begin(), plan.grants.end(),
                            [&](const BlockGrant& g) { return g.slot == s; });
  if (grant == plan.grants.end()) grant = plan.grants.insert(plan.grants.end(), BlockGrant{s, {}});
  grant->blocks.insert(grant->blocks.end(), fresh.begin(), fresh.end());
  return true;
}

void Scheduler::Preempt(int32_t s) {
  Slot& slot = slots_[s];
  Queued q{slot.request, slot.outputs, /*preempted=*/true, slot.emitted};
  const uint64_t key = slot.request->key;
  queued_prompt_tokens_ += static_cast<int64_t>(slot.request->prompt_ids.size() + q.resumed.size());
  FreeSlot(s);
  queue_.push_front(std::move(q));
  queued_[key] = queue_.begin();
  ++preempted_queued_;
  ++preemptions_;
}

int32_t Scheduler::DecodeExtent(const Slot& slot, int32_t draft) const {
  // The input's K/V goes to position prompt + bound - 1, the proposals' after it; nothing is
  // ever written past prompt + max_tokens - 1 (the runner proposes within max_tokens).
  const int32_t prompt = static_cast<int32_t>(slot.request->prompt_ids.size());
  return prompt + std::min(slot.bound + draft, slot.request->max_tokens);
}

void Scheduler::SettleDrafts(const StepResult& result) {
  std::vector<int32_t>& outputs = outputs_scratch_;
  outputs.assign(slots_.size(), 0);
  for (const SlotOutput& out : result.outputs) {
    if (out.slot >= 0 && out.slot < config_.sizes.max_slots) ++outputs[out.slot];
  }
  for (size_t s = 0; s < slots_.size(); ++s) {
    Slot& slot = slots_[s];
    while (!slot.drafts.empty() && slot.drafts.front().first <= result.step_id) {
      const auto [step, draft] = slot.drafts.front();
      slot.drafts.pop_front();
      // A decode gives its input's output and the proposals that stood (none when it ended).
      if (step == result.step_id && outputs[s] > 0) {
        slot.bound -= std::max(0, draft - (outputs[s] - 1));
      }
    }
  }
}

bool Scheduler::SecureDecodeBlocks(StepPlan& plan) {
  for (Slot& slot : slots_) slot.waits = false;
  if (!config_.kv_on_demand) return false;
  std::vector<int32_t> order;
  for (int32_t s = 0; s < config_.sizes.max_slots; ++s) {
    const Slot& slot = slots_[s];
    if (slot.phase == Phase::kDecode && slot.planned < slot.request->max_tokens) order.push_back(s);
  }
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return slots_[a].admission < slots_[b].admission; });
  bool preempted = false;
  for (const int32_t s : order) {
    Slot& slot = slots_[s];
    if (slot.phase != Phase::kDecode) continue;  // preempted by an older slot's need
    // A slot whose last decode is still in flight (that step may end it: this one would be
    // the pipeline's extra step) waits a step for its block rather than preempting anyone.
    const int32_t need = BlocksFor(DecodeExtent(slot, 0), config_.sizes.block_tokens) -
                         static_cast<int32_t>(slot.blocks.size());
    if (need > cache_.available() && slot.output_step > collected_step_) {
      slot.waits = true;
      continue;
    }
    while (!Grow(s, DecodeExtent(slot, 0), 0, plan)) {
      int32_t newest = -1;
      for (int32_t v = 0; v < config_.sizes.max_slots; ++v) {
        const Phase ph = slots_[v].phase;
        if ((ph == Phase::kPrefill || ph == Phase::kDecode) &&
            (newest < 0 || slots_[v].admission > slots_[newest].admission)) {
          newest = v;
        }
      }
      Preempt(newest);
      preempted = true;
      if (newest == s) break;
    }
  }
  return preempted;
}

int32_t Scheduler::PlanDecodes(StepPlan& plan) {
  auto decodes = [&](const Slot& slot) {
    return slot.phase == Phase::kDecode && slot.planned < slot.request->max_tokens && !slot.waits;
  };
  int32_t decoding = 0;
  for (const Slot& slot : slots_) decoding += decodes(slot) ? 1 : 0;
  if (decoding == 0) return 0;
  // The policy learns what its choice gave, the cap below included.
  last_k_ = policy_.Choose(decoding);
  int32_t k = last_k_;
  plan.draft_may_lapse = k == 0 && policy_.SettledOff(decoding);
  // Proposals never take the prompt budget of a capped step.
  if (k > 0 && config_.max_batch_tokens > 0) {
    const int32_t room = config_.max_batch_tokens - config_.max_prefill_tokens - decoding;
    k = std::clamp(room / decoding, 0, k);
  }
  const int32_t bt = config_.sizes.block_tokens;
  int32_t tokens = 0;
  for (int32_t s = 0; s < config_.sizes.max_slots; ++s) {
    Slot& slot = slots_[s];
    if (!decodes(slot)) continue;
    ++slot.planned;
    slot.output_step = plan.step_id;
    // Planned tokens are a lower bound of the generated ones: no proposal past max_tokens.
    // A constrained request speculates where the runner verifies under its masks.
    const bool speculates = slot.request->speculate && !slot.draft_lapsed &&
                            (slot.request->constraint == nullptr || config_.speculate_constrained);
    int32_t draft = speculates ? std::min(k, slot.request->max_tokens - slot.planned) : 0;
    if (config_.kv_on_demand && draft > 0 && !Grow(s, DecodeExtent(slot, draft), running_, plan)) {
      // Only the proposals the slot's blocks hold: past its input's position.
      const int32_t held = static_cast<int32_t>(slot.blocks.size()) * bt;
      draft = std::clamp(held - DecodeExtent(slot, 0), 0, draft);
    }
    slot.bound += 1 + draft;
    if (draft > 0) slot.drafts.emplace_back(plan.step_id, draft);
    plan.decodes.push_back(DecodeChunk{s, draft});
    tokens += 1 + draft;
    // The runner skips its draft's catch-up in this step: the slot's draft misses a position.
    slot.draft_lapsed = slot.draft_lapsed || (plan.draft_may_lapse && config_.draft_lapses);
  }
  return tokens;
}

void Scheduler::Add(RequestPtr request) {
  queued_prompt_tokens_ += static_cast<int64_t>(request->prompt_ids.size());
  const uint64_t key = request->key;
  queue_.push_back(Queued{std::move(request)});
  queued_[key] = std::prev(queue_.end());
}

bool Scheduler::Abort(uint64_t key) {
  if (const auto q = queued_.find(key); q != queued_.end()) {
    const Queued& entry = *q->second;
    queued_prompt_tokens_ -=
        static_cast<int64_t>(entry.request->prompt_ids.size() + entry.resumed.size());
    preempted_queued_ -= entry.preempted ? 1 : 0;
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
  for (const Queued& q : queue_) keys.push_back(q.request->key);
  queue_.clear();
  queued_.clear();
  queued_prompt_tokens_ = 0;
  preempted_queued_ = 0;
  for (Slot& slot : slots_) {
    if (slot.phase == Phase::kFree || slot.phase == Phase::kEnded) continue;
    keys.push_back(slot.request->key);
    slot.phase = Phase::kEnded;
  }
  return keys;
}

int32_t Scheduler::PromptLogprobRows(const StepPlan& plan) const {
  int32_t rows = 0;
  for (const PrefillChunk& p : plan.prefills) {
    if (slots_[p.slot].request->prompt_logprobs >= 0) rows += p.num_tokens;
  }
  return rows;
}

int32_t Scheduler::PlanPrefill(int32_t s, int32_t budget, StepPlan& plan) {
  Slot& slot = slots_[s];
  const auto prefix = static_cast<int32_t>(Prefix(slot).size());
  int32_t n = std::min(budget, prefix - slot.prefilled);
  if (slot.request->prompt_logprobs >= 0) {
    n = std::min(n, std::max(1, config_.max_prompt_logprob_rows - PromptLogprobRows(plan)));
  }
  if (n <= 0) return 0;
  const bool last = slot.prefilled + n == prefix;
  plan.prefills.push_back(PrefillChunk{s, slot.prefilled, n, last});
  slot.prefilled += n;
  slot.full_blocks = std::min(slot.prefilled / config_.sizes.block_tokens,
                              static_cast<int32_t>(slot.hashes.size()));
  if (last) {
    slot.phase = Phase::kDecode;
    slot.planned = slot.bound = slot.resumed + 1;
    slot.output_step = plan.step_id;
  }
  return n;
}

void Scheduler::RegisterBlocks(Slot& slot) {
  const int32_t bt = config_.sizes.block_tokens;
  const std::span<const int32_t> prefix = Prefix(slot);
  for (; slot.registered < slot.full_blocks; ++slot.registered) {
    const int32_t b = slot.registered;
    cache_.Insert(slot.blocks[static_cast<size_t>(b)], slot.hashes[static_cast<size_t>(b)],
                  b > 0 ? slot.hashes[static_cast<size_t>(b - 1)] : 0,
                  prefix.subspan(static_cast<size_t>(b * bt), static_cast<size_t>(bt)));
  }
}

void Scheduler::RegisterOutputBlocks(const Slot& slot) {
  // Outputs sampled after the prefix (the prefix's blocks are registered as they are planned).
  const size_t fresh = slot.outputs.size() - static_cast<size_t>(slot.resumed);
  if (!cache_.enabled() || fresh < 2) return;
  // The prefix's blocks were all registered once its last chunk was planned (before any output).
  if (slot.registered != static_cast<int32_t>(slot.hashes.size())) return;
  const int32_t bt = config_.sizes.block_tokens;
  const std::span<const int32_t> prefix = Prefix(slot);
  // Positions whose K/V is final: the prefix and every output after it but the last.
  const size_t written = prefix.size() + fresh - 1;
  const auto full = static_cast<int32_t>(written / static_cast<size_t>(bt));
  const int32_t first = slot.registered;  // the first block past the prefix's full blocks
  if (full <= first) return;
  // The new blocks' tokens (the prefix's tail, then outputs), hashed on from the prefix's chain.
  const size_t begin = static_cast<size_t>(first) * bt, end = static_cast<size_t>(full) * bt;
  std::vector<int32_t> tokens(prefix.begin() + static_cast<std::ptrdiff_t>(begin), prefix.end());
  const auto after = slot.outputs.begin() + slot.resumed;
  tokens.insert(tokens.end(), after, after + static_cast<std::ptrdiff_t>(end - prefix.size()));
  uint64_t parent = first > 0 ? slot.hashes[static_cast<size_t>(first - 1)] : 0;
  const std::vector<uint64_t> hashes = cache_.ChainHashes(tokens, full - first, parent);
  for (int32_t b = first; b < full; ++b) {
    const auto i = static_cast<size_t>(b - first);
    cache_.Insert(slot.blocks[static_cast<size_t>(b)], hashes[i], parent,
                  std::span<const int32_t>(tokens).subspan(i * bt, static_cast<size_t>(bt)));
    parent = hashes[i];
  }
}

void Scheduler::FreeSlot(int32_t s) {
  Slot& slot = slots_[s];
  RegisterOutputBlocks(slot);
  cache_.Release(slot.blocks);
  slot_of_.erase(slot.request->key);
  slot = Slot{};
  free_slots_.push_back(s);
  // Keep the lowest free index on top so slot use stays compact.
  std::sort(free_slots_.begin(), free_slots_.end(), std::greater<>());
  prefill_order_.erase(std::remove(prefill_order_.begin(), prefill_order_.end(), s),
                       prefill_order_.end());
  unsent_releases_.push_back(s);
  --running_;
}

// (Its length before the cache is looked up: a long prompt mostly cached may wait a step.)
bool Scheduler::HeadPaced(bool long_ok) const {
  const Queued& head = queue_.front();
  return !long_ok && head.resumed.empty() &&
         IsLong(static_cast<int32_t>(head.request->prompt_ids.size()));
}

bool Scheduler::AdmitHead(StepPlan& plan, int32_t& budget, bool long_ok) {
  const int32_t bt = config_.sizes.block_tokens;
  Queued& head = queue_.front();
  const EngineRequest& r = *head.request;
  if (HeadPaced(long_ok)) return false;
  std::vector<int32_t> joined;  // prompt + resumed outputs, after a preemption
  if (!head.resumed.empty()) {
    joined = r.prompt_ids;
    joined.insert(joined.end(), head.resumed.begin(), head.resumed.end());
  }
  const std::span<const int32_t> prefix =
      joined.empty() ? std::span<const int32_t>(r.prompt_ids) : std::span<const int32_t>(joined);
  const auto len = static_cast<int32_t>(prefix.size());
  // The longest cached run of whole blocks, leaving at least one prefix token to compute (its
  // logits give the next output token).
  std::vector<uint64_t> hashes = cache_.ChainHashes(prefix, len / bt);
  size_t matchable = std::min(hashes.size(), static_cast<size_t>((len - 1) / bt));
  // Penalties see the prompt's tokens (repetition) and the generated ones (all three), which
  // the CUDA runner takes from the rows it prefills (its prompt mask and output counts): what
  // they need is computed, not taken from the cache.
  if (r.prompt_logprobs >= 0) {
    matchable = 0;  // every prompt token's logprob comes from a row computed now
  } else if (!config_.penalties_from_prefill) {
    // The runner keeps penalties from the token ids themselves (the CPU's).
  } else if (r.sampling.repetition_penalty != 1.0f) {
    matchable = 0;
  } else if (!head.resumed.empty() && r.sampling.has_penalties()) {
    matchable = std::min(matchable, r.prompt_ids.size() / static_cast<size_t>(bt));
  }
  std::vector<int32_t> blocks =
      cache_.Match(std::span<const uint64_t>(hashes).first(matchable), prefix);
  // On demand: the prefix and its first decode, keeping a block per running request.
  const int32_t tokens = config_.kv_on_demand ? len + 1 : r.total_tokens();
  const int32_t keep = config_.kv_on_demand ? running_ : 0;
  const int32_t need = BlocksFor(tokens, bt) - static_cast<int32_t>(blocks.size());
  // Matched blocks nobody holds are counted as evictable room; once taken they are not.
  if (need + keep > cache_.available() - cache_.CountUnreferenced(blocks)) return false;
  cache_.Acquire(blocks);
  const std::vector<int32_t> fresh = *cache_.Allocate(need);
  blocks.insert(blocks.end(), fresh.begin(), fresh.end());
  const auto cached = static_cast<int32_t>(blocks.size() - fresh.size());
  // Prompts looked up, not readmissions (their own blocks would inflate the hit rate).
  if (!head.preempted) cache_.RecordLookup(len, static_cast<int64_t>(cached) * bt);
  const int32_t s = free_slots_.back();
  free_slots_.pop_back();
  Slot& slot = slots_[s];
  slot = Slot{};
  slot.phase = Phase::kPrefill;
  slot.request = head.request;
  slot.blocks = std::move(blocks);
  slot.prefilled = cached * bt;
  slot.admitted_step = plan.step_id;
  slot.admission = ++admissions_;
  slot.hashes = std::move(hashes);
  slot.cached_tokens = std::min(cached * bt, static_cast<int32_t>(r.prompt_ids.size()));
  slot.full_blocks = cached;
  slot.registered = cached;
  slot.emitted = head.emitted;
  slot.resumed = static_cast<int32_t>(head.resumed.size());
  slot.prefix = std::move(joined);
  slot.outputs = head.resumed;
  slot_of_[r.key] = s;
  ++running_;
  queued_prompt_tokens_ -= len;
  preempted_queued_ -= head.preempted ? 1 : 0;
  plan.admissions.push_back(
      SlotAdmission{s, head.request, slot.blocks, std::move(head.resumed), head.preempted});
  queued_.erase(r.key);
  queue_.pop_front();
  budget -= PlanPrefill(s, budget, plan);
  if (slot.phase == Phase::kPrefill) prefill_order_.push_back(s);
  return true;
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  plan.step_id = ++step_id_;

  // 0. Prefix blocks written by earlier steps become reusable (this step runs after them).
  for (Slot& slot : slots_) {
    if (slot.phase != Phase::kFree) RegisterBlocks(slot);
  }

  // 1. Retire slots whose request ended.
  for (int32_t s = 0; s < config_.sizes.max_slots; ++s) {
    if (slots_[s].phase == Phase::kEnded) FreeSlot(s);
  }

  // 2. One decode chunk for every slot past its prefix that may still generate: its last
  // token, and the proposals the speculation policy allows; first the blocks they write to.
  const bool preempted = SecureDecodeBlocks(plan);
  const int32_t decode_tokens = PlanDecodes(plan);

  // 3. Continue prefixes, oldest admission first, within the prefill budget: the longer one
  // when nothing decodes in this step (no stream waits on it).
  // A long prompt's chunk only where PrefillPacer allows it (short prompts go on meanwhile).
  // A step that measures a decode-only time for the pacer takes no prompt tokens.
  const int32_t full_budget =
      pacer_.Probe(decode_tokens) ? 0 : config_.PrefillBudget(decode_tokens);
  const bool long_ok = pacer_.Allow(decode_tokens);
  int32_t budget = full_budget, paced = 0;
  bool held = false;  // a long prompt waited for the pacer
  for (int32_t s : prefill_order_) {
    if (budget <= 0) break;
    const Slot& slot = slots_[s];
    if (slot.phase != Phase::kPrefill) continue;
    const bool is_long = Paced(slot);
    if (is_long && !long_ok) {
      held = true;
      continue;
    }
    const int32_t n = PlanPrefill(s, budget, plan);
    budget -= n;
    if (is_long) paced += n;
  }
  prefill_order_.erase(
      std::remove_if(prefill_order_.begin(), prefill_order_.end(),
                     [&](int32_t s) { return slots_[s].phase != Phase::kPrefill; }),
      prefill_order_.end());

  // 4. Admit queued requests, first come first served: the head waits for room rather than
  // being overtaken, so a large request is never starved. None in a step that preempted.
  while (!preempted && budget > 0 && !free_slots_.empty() && !queue_.empty()) {
    const int32_t before = budget;
    if (!AdmitHead(plan, budget, long_ok)) {
      held = held || HeadPaced(long_ok);
      break;
    }
    if (Paced(slots_[plan.prefills.back().slot])) paced += before - budget;
  }
  if (held) ++paced_steps_;

  // 5. Releases go out with a plan that computes something (one that does not is not launched).
  if (!plan.empty()) {
    plan.releases.swap(unsent_releases_);
    pacer_.Planned(plan.step_id, decode_tokens, full_budget - budget, paced);
    if (config_.speculative.enabled()) {
      planned_steps_.push_back(PlannedStep{plan.step_id, static_cast<int32_t>(plan.decodes.size()),
                                           last_k_, plan.num_draft_tokens() > 0,
                                           !plan.prefills.empty()});
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
  // A step planned at k > 0 in which no slot got proposals (all lapsed, opted out or near
  // their end) measures nothing about k.
  if (step.prompt || step.decoding == 0 || (step.k > 0 && !step.proposed)) return;
  policy_.Observe(step.decoding, step.k, static_cast<int32_t>(result.outputs.size()),
                  result.device_seconds);
}

void Scheduler::Update(const StepResult& result, std::vector<TokenEvent>& events) {
  collected_step_ = std::max(collected_step_, result.step_id);
  ObserveStep(result);
  pacer_.Observe(result.step_id, result.device_seconds);
  SettleDrafts(result);
  for (const SlotOutput& out : result.outputs) {
    if (out.slot < 0 || out.slot >= config_.sizes.max_slots) continue;
    Slot& slot = slots_[out.slot];
    if (slot.phase == Phase::kFree || slot.phase == Phase::kEnded ||
        slot.request->key != out.request_key || result.step_id < slot.admitted_step) {
      // The extra step of an ended request, a slot that changed hands, or a step launched
      // before a preempted request was readmitted (it computes those tokens again).
      continue;
    }
    if (out.finish != sampling::FinishReason::kNone) slot.phase = Phase::kEnded;
    slot.outputs.push_back(out.sampled.token_id);
    events.push_back(TokenEvent{out.request_key, out.sampled, out.finish,
                                slot.emitted ? -1 : slot.cached_tokens, out.draft_tokens,
                                out.accepted_tokens});
    if (!slot.emitted) events.back().prompt_logprobs = out.prompt_logprobs;
    slot.emitted = true;
  }
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.queued_requests = static_cast<int32_t>(queue_.size());
  s.queued_prompt_tokens = queued_prompt_tokens_;
  s.preempted_requests = preempted_queued_;
  s.preemptions = preemptions_;
  s.paced_steps = paced_steps_;
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
  s.speculation_by_batch = policy_.standing();
  return s;
}

absl::Status Scheduler::CheckAccounting() const {
  auto fail = [](auto&&... parts) { return absl::InternalError(absl::StrCat(parts...)); };
  std::unordered_map<int32_t, int32_t> refs;
  int32_t running = 0;
  for (int32_t s = 0; s < config_.sizes.max_slots; ++s) {
    const Slot& slot = slots_[s];
    if (slot.phase == Phase::kFree) {
      if (!slot.blocks.empty()) return fail("free slot ", s, " holds blocks");
      continue;
    }
    ++running;
    for (const int32_t b : slot.blocks) ++refs[b];
    // Positions its planned steps write: the prefix, then one per output but the last.
    const int32_t written = slot.phase == Phase::kPrefill
                                ? static_cast<int32_t>(Prefix(slot).size())
                                : DecodeExtent(slot, 0) - 1;
    if (static_cast<int64_t>(slot.blocks.size()) * config_.sizes.block_tokens < written) {
      return fail("slot ", s, " holds ", slot.blocks.size(), " blocks for ", written, " positions");
    }
  }
  if (running != running_) return fail(running, " slots run, counted ", running_);
  if (static_cast<int32_t>(refs.size()) != cache_.num_referenced()) {
    return fail(refs.size(), " blocks held by slots, the pool counts ", cache_.num_referenced());
  }
  for (const auto& [block, n] : refs) {
    if (cache_.refs(block) != n) {
      return fail("block ", block, " is held ", n, " times, referenced ", cache_.refs(block));
    }
  }
  const PrefixCacheStats c = cache_.stats();
  if (cache_.num_referenced() + c.evictable_blocks + cache_.num_free() != cache_.num_blocks()) {
    return fail(cache_.num_referenced(), " referenced + ", c.evictable_blocks, " evictable + ",
                cache_.num_free(), " free != ", cache_.num_blocks());
  }
  int32_t preempted = 0;
  int64_t tokens = 0;
  for (const Queued& q : queue_) {
    preempted += q.preempted ? 1 : 0;
    tokens += static_cast<int64_t>(q.request->prompt_ids.size() + q.resumed.size());
  }
  if (preempted != preempted_queued_ || tokens != queued_prompt_tokens_ ||
      queued_.size() != queue_.size()) {
    return fail("queue figures disagree: ", preempted, " preempted, ", tokens, " tokens");
  }
  return absl::OkStatus();
}

}  // namespace llm::engine
