// The continuous-batching scheduler: a fixed table of slots, a FIFO queue of requests waiting
// for one, and the paged KV block pool. Pure logic: no threads, clocks, CUDA or gRPC; the engine
// thread owns it and it is unit-tested with a fake runner.
//
// Each Schedule() is an incremental change of the previous step: retire slots whose request
// ended, add one decode token for every slot past its prompt, continue prompts being prefilled,
// then admit queued requests into free slots while slots, blocks and the prefill budget allow.
//
// KV blocks on demand (SchedulerConfig::kv_on_demand, the default):
//  - Admission takes the blocks of the request's prefix (its prompt, and after a preemption the
//    tokens it had generated) and of its first decode, less the prefix-cache hits. The headroom
//    rule: it is admitted only if the pool keeps, after that, one free or evictable block for
//    every request already running (each may cross a block boundary in the next step). With
//    nothing running, any request that fits the pool is admitted.
//  - A decoding slot takes a block when its next step writes past its last one (a BlockGrant in
//    the plan); proposals take blocks only while the headroom stays, else fewer are allowed.
//  - When a step's decodes need blocks the pool cannot give, the most recently admitted running
//    request is preempted (the newest has lost the least work, and the oldest always makes
//    progress: a request that fits the pool alone finishes): the slots are served oldest
//    admission first, and each preempts the newest until it has its block (it may be the
//    newest itself). A preempted request's blocks are released, its full blocks with final K/V
//    stay in the prefix cache, and it goes back to the head of the queue with the tokens it had
//    generated. Readmitted, it prefills its prompt and those tokens (the cache's hits skipped)
//    and its last prefill chunk samples its next token with the same counter an unpreempted run
//    would use, so greedy and seeded outputs continue unchanged; outputs of steps launched
//    before its readmission are dropped. No request is admitted in a step that preempted.
// With kv_on_demand off, admission reserves prompt + max_tokens and nothing is preempted.
// A request keeps its slot until it finishes, is aborted or is preempted.
//
// Prefix caching (SchedulerConfig::prefix_cache): at admission a request takes the longest run
// of cached full blocks matching its prompt (shared, reference-counted; counted once in the
// reservation) and prefills only the rest, always at least its last prompt token. Its own full
// prompt blocks become reusable from the step after the one that writes them (so no step reads
// a block that the same step writes). When it ends, the full blocks holding its generated
// tokens join them (a chat's next turn resends the answer), up to the last but one sampled
// token: a token's K/V is written by the step that takes it as input, and every step that wrote
// those has been collected. Cached blocks stay until an allocation needs the room (least
// recently used first). See prefix_cache.h.
//
// A plan that computes nothing (empty()) need not be launched: the slots it retired stay in the
// scheduler and are released by the next plan that computes something, before its admissions.
//
// Pipelining: Schedule() may be called again before the previous step's result has come back.
// Decodes are planned from the number of tokens already planned, so a slot whose request hit
// EOS in step N may still decode in step N+1 (the runner's output for it is discarded); slots
// are retired, and their blocks freed, at the first Schedule() after Update() reports the end.
//
// Speculative decoding (SchedulerConfig::speculative): a decode chunk may carry proposals
// (StepPlan's DecodeChunk::max_draft, as SpeculationPolicy chooses from measured throughput;
// none for a request that opted out). A step then gives a slot one or more outputs, so a slot
// counts planned tokens as a lower bound: it may reach max_tokens (or a stop token) earlier
// than planned, and decode once more in the step after, like a stop token's extra step. The
// slot's blocks cover every proposal the plan allows (the runner proposes at most up to
// max_tokens and within the slot's blocks), so a rejected proposal's K/V lies in the slot's own
// blocks past its length and is overwritten by the tokens that follow.
#ifndef LLM_WORKER_ENGINE_SCHEDULER_H_
#define LLM_WORKER_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "worker/engine/block_allocator.h"
#include "worker/engine/engine_sizes.h"
#include "worker/engine/prefill_pacer.h"
#include "worker/engine/prefix_cache.h"
#include "worker/engine/request.h"
#include "worker/engine/speculation.h"
#include "worker/engine/speculation_policy.h"
#include "worker/engine/step.h"

namespace llm::engine {

struct SchedulerConfig {
  EngineSizes sizes{.max_slots = 64, .kv_blocks = 1024, .block_tokens = 16};  // the runner's
  // Decode + prefill tokens per step; 0: no cap beyond the slots and the prefill budgets.
  int32_t max_batch_tokens = 2048;
  int32_t max_prefill_tokens = 512;  // prefill tokens per step, so decode never stalls
  // Prefill tokens of a step in which no slot decodes, when more than max_prefill_tokens: with
  // no stream's time per output token to protect, a longer chunk only shortens the prompt's
  // time to first token (fewer steps, larger products). 0: max_prefill_tokens.
  int32_t max_prefill_tokens_alone = 0;
  // While requests decode, a long prompt's chunks (a prompt of more than max_prefill_tokens
  // to compute) are spaced out so that the decoding requests' time per output token stays
  // within this many times a decode-only step's, as measured (PrefillPacer). 0: off, every
  // step takes its chunks; else more than 1. (The worker's configuration defaults to 2.)
  double max_decode_slowdown = 0.0;
  bool prefix_cache = true;  // reuse the KV of cached prompt prefixes
  // Take KV blocks as sequences grow and preempt when the pool runs out (needs a runner with
  // RunnerInfo::kv_on_demand); false: reserve prompt + max_tokens at admission.
  bool kv_on_demand = true;
  // The runner takes penalty state from the rows it prefills (RunnerInfo::
  // penalties_from_prefill): what penalties need is computed rather than taken from the cache.
  bool penalties_from_prefill = false;
  // Prompt tokens of a step whose every row keeps its logits (EngineRequest::prompt_logprobs):
  // a row holds a whole vocabulary (128k ids: 512 KiB on the CPU), so such prompts go in chunks
  // of at most this many tokens over the step (each at least one token).
  int32_t max_prompt_logprob_rows = 256;
  uint64_t cache_salt = 0;  // mixed into every block hash (the model's identity)
  // Speculative decoding: decode chunks carry up to speculative.num_tokens proposals, as
  // SpeculationPolicy chooses per step (the runner proposes and verifies them).
  SpeculativeConfig speculative;
  // Constrained requests get proposals too (RunnerInfo::speculates_constrained).
  bool speculate_constrained = false;
  // The runner lets its draft model lapse in plans with StepPlan::draft_may_lapse
  // (RunnerInfo::draft_lapses): the slots decoding in them get no proposals afterwards.
  bool draft_lapses = false;

  // INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
  // How blocks are given out, for the worker's start line: on demand with the headroom rule,
  // or reserved.
  std::string DescribeKvPolicy() const;
  // Prompt tokens a step with `decodes` decode tokens may take: max_prefill_tokens, or with none
  // the larger max_prefill_tokens_alone, within max_batch_tokens when that is set.
  int32_t PrefillBudget(int32_t decodes) const;
};

// A sampled token of a live request, in the order the step produced it.
struct TokenEvent {
  uint64_t request_key;
  sampling::SampledToken sampled;
  sampling::FinishReason finish;      // kNone, kStopToken or kLength
  int32_t cached_prompt_tokens = -1;  // on a request's first event: prompt tokens found cached
  // On the first event of a verifying decode: proposals verified and accepted (SlotOutput).
  int32_t draft_tokens = 0;
  int32_t accepted_tokens = 0;
  // On a request's first event, when it asked for them: SlotOutput::prompt_logprobs.
  std::vector<sampling::SampledToken> prompt_logprobs;
};

struct SchedulerStats {
  // Requests waiting for a slot (preempted ones included) and the tokens their admission will
  // compute (a preempted request's prompt and the tokens it had generated).
  int32_t queued_requests = 0;
  int64_t queued_prompt_tokens = 0;
  int32_t preempted_requests = 0;  // of the queued ones, those waiting after a preemption
  uint64_t preemptions = 0;        // since the start (a request preempted twice counts twice)
  // Steps, since the start, in which a long prompt's next chunk (or its admission) waited for
  // PrefillPacer so that decoding streams slow at most max_decode_slowdown times.
  uint64_t paced_steps = 0;
  int32_t running_requests = 0;
  int32_t free_slots = 0;
  int32_t max_slots = 0;
  int32_t kv_blocks_used = 0;  // referenced by running requests
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_cached = 0;     // holding a reusable prefix (referenced or not)
  int32_t kv_blocks_evictable = 0;  // cached and unreferenced: reclaimed when room is needed
  int32_t kv_blocks_free = 0;       // neither referenced nor cached
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up in the cache, since the start
  int64_t prefix_hit_tokens = 0;    // of which found cached
  // Proposals per decoding slot in the latest plan with decodes (SpeculationPolicy's choice);
  // 0 with speculation off.
  int32_t draft_tokens_per_slot = 0;
  // Where the speculation policy stands per group of batch sizes (SpeculationPolicy::standing:
  // the proposals per slot it settled on, 0 where it turned speculation off, -1 while it
  // measures or with speculation off).
  SpeculationPolicy::Standing speculation_by_batch{};
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a request; requires a key not in use and prompt + max_tokens within the whole pool
  // (RequestLimits::kv_capacity_tokens checks it before a request gets here), so it can always
  // finish once it runs alone.
  void Add(RequestPtr request);
  // Ends a queued or running request; its slot is retired at the next Schedule(). Returns false
  // for an unknown (or already ended) key.
  bool Abort(uint64_t key);

  // Ends every queued and running request (a backend failure); returns their keys.
  std::vector<uint64_t> AbortAll();

  StepPlan Schedule();
  // Applies a step's outputs; appends the events of live requests to `events`. Outputs for
  // slots whose request has ended or changed are dropped.
  void Update(const StepResult& result, std::vector<TokenEvent>& events);

  SchedulerStats stats() const;
  // The speculation policy, as its measurements stand.
  const SpeculationPolicy& policy() const { return policy_; }
  const SchedulerConfig& config() const { return config_; }
  // True when nothing is queued or running.
  bool idle() const { return queue_.empty() && running_ == 0; }
  // Checks that every block is accounted for: each running request's blocks cover what its
  // planned steps write, the pool's references equal the running requests' holdings, and
  // referenced + evictable + free = the pool. INTERNAL naming the first mismatch (tests).
  absl::Status CheckAccounting() const;

 private:
  enum class Phase : uint8_t { kFree, kPrefill, kDecode, kEnded };
  struct Slot {
    Phase phase = Phase::kFree;
    RequestPtr request;
    std::vector<int32_t> blocks;
    int32_t prefilled = 0;  // prefix tokens planned (cached ones included)
    int32_t planned = 0;    // output tokens planned (resumed ones included)
    // The most outputs the planned steps can give (accepted proposals included): the K/V the
    // next step writes goes to position prompt + bound - 1 at most. == planned without
    // proposals; lowered as results show how many proposals stood.
    int32_t bound = 0;
    std::deque<std::pair<uint64_t, int32_t>> drafts;  // (step, proposals) of uncollected decodes
    bool waits = false;  // this step: no block for its decode while its last one is in flight
    bool draft_lapsed = false;  // decoded in a plan that let the draft lapse (draft_lapses)
    // The last planned step that gives it an output (its prompt's last chunk, then each
    // decode): in flight while later than collected_step_. (Counting outputs against planned
    // ones cannot tell: accepted proposals give outputs no plan counted.)
    uint64_t output_step = 0;
    uint64_t admitted_step = 0;
    uint64_t admission = 0;        // admission order (preemption takes the newest)
    std::vector<uint64_t> hashes;  // chain hashes of the prefix's full blocks
    int32_t cached_tokens = 0;     // prefix tokens found cached at admission
    int32_t full_blocks = 0;       // full prefix blocks planned (written by planned steps)
    int32_t registered = 0;        // full prefix blocks inserted into the cache
    bool emitted = false;          // its first token event went out
    int32_t resumed = 0;           // outputs generated before its last preemption
    std::vector<int32_t> prefix;   // prompt + resumed outputs when resumed > 0 (else empty)
    std::vector<int32_t> outputs;  // tokens sampled so far (resumed ones first)
  };
  // A request waiting for a slot; `resumed`: what it generated before a preemption.
  struct Queued {
    RequestPtr request;
    std::vector<int32_t> resumed;
    bool preempted = false;
    bool emitted = false;
  };

  // The tokens a slot prefills: the prompt, then any resumed outputs.
  static std::span<const int32_t> Prefix(const Slot& slot);
  // Inserts the full prompt blocks planned by earlier steps into the cache.
  void RegisterBlocks(Slot& slot);
  // At retirement: inserts the full blocks past the prompt whose KV is final (see Schedule).
  void RegisterOutputBlocks(const Slot& slot);

  // Plans the next chunk of slot `s`'s prefix within `budget`; returns tokens used.
  int32_t PlanPrefill(int32_t s, int32_t budget, StepPlan& plan);
  // The prompt tokens of `plan` whose rows keep their logits (prompt_logprobs).
  int32_t PromptLogprobRows(const StepPlan& plan) const;
  // Admits the head of the queue into a free slot if blocks and the headroom rule allow.
  // `long_ok`: a long prompt may start (PrefillPacer); else one waits at the head.
  bool AdmitHead(StepPlan& plan, int32_t& budget, bool long_ok);
  // A prompt of more than one chunk: PrefillPacer spaces its chunks out.
  bool IsLong(int32_t prefix_tokens) const { return prefix_tokens > config_.max_prefill_tokens; }
  // The queue's head is a long prompt the pacer holds back (a preempted request, a stream that
  // was decoding, is not held back).
  bool HeadPaced(bool long_ok) const;
  // A slot whose prefill is paced: a long prompt to compute, not a preempted stream's.
  bool Paced(const Slot& slot) const {
    return slot.resumed == 0 &&
           IsLong(static_cast<int32_t>(Prefix(slot).size()) - slot.cached_tokens);
  }
  // Frees slot `s` (ended or preempted): registers its final blocks, releases the rest.
  void FreeSlot(int32_t s);
  // Gives every slot that decodes in this step the block its input token's K/V goes to,
  // oldest admission first, preempting the newest running request while the pool is short.
  // Returns whether any request was preempted.
  bool SecureDecodeBlocks(StepPlan& plan);
  // Slot `s` back to the head of the queue with what it generated.
  void Preempt(int32_t s);
  // Grows slot `s`'s blocks to hold positions [0, tokens) if the pool can give them and still
  // keep `keep_free` blocks; records the grant in `plan`.
  bool Grow(int32_t s, int32_t tokens, int32_t keep_free, StepPlan& plan);
  // Adds a decode chunk for every slot past its prompt that may still generate, with the
  // proposals the policy allows; returns the decode tokens (proposals included).
  int32_t PlanDecodes(StepPlan& plan);
  // Positions slot `s`'s next decode writes with `draft` proposals (at most the request's).
  int32_t DecodeExtent(const Slot& slot, int32_t draft) const;
  // Lowers each slot's bound by the proposals of `result` that did not stand.
  void SettleDrafts(const StepResult& result);
  // Feeds the policy the throughput of a collected decode-only step.
  void ObserveStep(const StepResult& result);

  SchedulerConfig config_;
  PrefixCache cache_;
  std::vector<Slot> slots_;
  std::vector<int32_t> free_slots_;  // stack, lowest index on top
  std::list<Queued> queue_;
  std::unordered_map<uint64_t, std::list<Queued>::iterator> queued_;
  std::unordered_map<uint64_t, int32_t> slot_of_;  // running request -> slot
  std::vector<int32_t> prefill_order_;             // slots in kPrefill, oldest admission first
  std::vector<int32_t> unsent_releases_;  // retired slots no launched plan has released yet
  std::vector<int32_t> outputs_scratch_;  // per slot, outputs in the result being applied
  uint64_t collected_step_ = 0;           // the latest step whose result Update applied
  int64_t queued_prompt_tokens_ = 0;
  int32_t running_ = 0;
  int32_t preempted_queued_ = 0;
  uint64_t preemptions_ = 0;
  uint64_t paced_steps_ = 0;
  uint64_t admissions_ = 0;
  uint64_t step_id_ = 0;

  // Speculation: the policy, and what each plan not yet collected asked for.
  struct PlannedStep {
    uint64_t step_id;
    int32_t decoding;  // slots that decode
    int32_t k;         // proposals per slot the policy chose
    bool proposed;     // some decode carried proposals (else a k > 0 step is not one)
    bool prompt;       // it also computes prompt tokens (not a sample of decode throughput)
  };
  SpeculationPolicy policy_;
  PrefillPacer pacer_;
  std::list<PlannedStep> planned_steps_;
  int32_t last_k_ = 0;
};

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_SCHEDULER_H_
