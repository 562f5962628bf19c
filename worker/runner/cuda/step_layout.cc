#include "worker/runner/cuda/step_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace llm::runner::cuda {

namespace {

int32_t RoundUp(int32_t x, int32_t m) { return (x + m - 1) / m * m; }

}  // namespace

std::vector<int32_t> MakeBuckets(int32_t max_slots) {
  std::vector<int32_t> b;
  for (int32_t v : {1, 2, 4, 8}) b.push_back(v);
  for (int32_t v = 16; v <= 64; v += 8) b.push_back(v);
  for (int32_t v = 80; v <= 128; v += 16) b.push_back(v);
  for (int32_t v = 160; v <= 256; v += 32) b.push_back(v);
  for (int32_t v = 320; v < max_slots; v += 64) b.push_back(v);
  std::vector<int32_t> out;
  for (int32_t v : b) {
    if (v < max_slots) out.push_back(v);
  }
  out.push_back(max_slots);
  return out;
}

std::vector<int32_t> SpeculativeGroups(int32_t spec_group) {
  std::vector<int32_t> groups;
  for (int32_t k = 1; 1 + k < spec_group; k *= 2) groups.push_back(1 + k);
  if (spec_group > 1) groups.push_back(spec_group);
  return groups;
}

kernels::SlotSampling ToSlotSampling(const engine::EngineRequest& r) {
  kernels::SlotSampling s{};
  s.temperature = r.sampling.temperature;
  s.top_p = r.sampling.top_p;
  s.min_p = r.sampling.min_p;
  s.repetition_penalty = r.sampling.repetition_penalty;
  s.presence_penalty = r.sampling.presence_penalty;
  s.frequency_penalty = r.sampling.frequency_penalty;
  s.top_k = static_cast<int32_t>(r.sampling.top_k);  // validated: <= vocab
  s.max_tokens = r.max_tokens;
  s.seed = r.sampling.seed;
  s.key = r.key;
  s.num_stop_ids = static_cast<int32_t>(
      std::min<size_t>(r.stop_token_ids.size(), static_cast<size_t>(kernels::kMaxStopIds)));
  std::copy_n(r.stop_token_ids.begin(), s.num_stop_ids, s.stop_ids);
  s.num_top_logprobs = r.num_top_logprobs;
  s.want_logprob = r.want_logprobs ? 1 : 0;
  s.has_penalties = r.sampling.has_penalties() ? 1 : 0;
  s.prompt_tokens = static_cast<int32_t>(r.prompt_ids.size());
  return s;
}

SlotMirror::SlotMirror(const StepLimits& limits, std::vector<int32_t> buckets)
    : limits_(limits),
      buckets_(std::move(buckets)),
      slots_(limits.sizes.max_slots),
      blocks_after_(limits.sizes.max_slots, 0),
      decode_rows_(limits.sizes.max_slots, -1),
      row_changed_(limits.sizes.max_slots, 0) {
  changed_rows_.reserve(2 * limits.sizes.max_slots);
}

namespace {

absl::Status Bad(const engine::StepPlan& plan, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("plan ", plan.step_id, ": ", what));
}

}  // namespace

int32_t SlotMirror::PrefixToken(const Slot& x, int32_t pos) {
  const auto prompt = static_cast<int32_t>(x.request->prompt_ids.size());
  return pos < prompt ? x.request->prompt_ids[pos] : x.resumed[pos - prompt];
}

absl::Status SlotMirror::CheckAdmissions(const engine::StepPlan& plan) {
  const int32_t S = limits_.sizes.max_slots;
  for (const auto& a : plan.admissions) {
    if (a.slot < 0 || a.slot >= S || a.request == nullptr) return Bad(plan, "bad admission");
    const Slot& x = slots_[a.slot];
    if (x.admitted == mark_ || (x.released != mark_ && x.request != nullptr)) {
      return Bad(plan, absl::StrCat("admission into busy slot ", a.slot));
    }
    const engine::EngineRequest& r = *a.request;
    const auto prefix = static_cast<int64_t>(r.prompt_ids.size() + a.resumed.size());
    if (static_cast<int32_t>(a.blocks.size()) > limits_.max_blocks_per_seq ||
        static_cast<int64_t>(a.blocks.size()) * limits_.sizes.block_tokens < prefix ||
        r.total_tokens() > limits_.max_context) {
      return Bad(plan, absl::StrCat("slot ", a.slot, ": blocks do not cover the request"));
    }
    for (int32_t b : a.blocks) {
      if (b < 0 || b >= limits_.sizes.kv_blocks) return Bad(plan, absl::StrCat("KV block ", b));
    }
    if (r.stop_token_ids.size() > static_cast<size_t>(kernels::kMaxStopIds) ||
        r.num_top_logprobs < 0 || r.num_top_logprobs > kernels::kMaxTopLogprobs ||
        r.max_tokens < 1 || r.prompt_ids.empty() ||
        static_cast<int64_t>(a.resumed.size()) >= r.max_tokens) {
      return Bad(plan, absl::StrCat("slot ", a.slot, ": request outside the runner's limits"));
    }
    for (const auto* ids : {&r.prompt_ids, &a.resumed}) {
      for (int32_t t : *ids) {
        if (t < 0 || t >= limits_.vocab_size) return Bad(plan, absl::StrCat("prompt token ", t));
      }
    }
    slots_[a.slot].admitted = mark_;
    blocks_after_[a.slot] = static_cast<int32_t>(a.blocks.size());
  }
  return absl::OkStatus();
}

absl::Status SlotMirror::CheckGrants(const engine::StepPlan& plan) {
  for (const engine::BlockGrant& g : plan.grants) {
    if (g.slot < 0 || g.slot >= limits_.sizes.max_slots) {
      return Bad(plan, absl::StrCat("grant to slot ", g.slot, " out of range"));
    }
    Slot& x = slots_[g.slot];
    if (x.admitted == mark_ || x.released == mark_ || x.request == nullptr || x.granted == mark_) {
      return Bad(plan, absl::StrCat("grant to slot ", g.slot,
                                    ", which holds no running request "
                                    "(or is admitted or granted twice in the same plan)"));
    }
    blocks_after_[g.slot] = x.blocks + static_cast<int32_t>(g.blocks.size());
    if (blocks_after_[g.slot] > limits_.max_blocks_per_seq) {
      return Bad(plan, absl::StrCat("slot ", g.slot, ": ", blocks_after_[g.slot],
                                    " blocks overflow its block table"));
    }
    for (int32_t b : g.blocks) {
      if (b < 0 || b >= limits_.sizes.kv_blocks) return Bad(plan, absl::StrCat("KV block ", b));
    }
    x.granted = mark_;
  }
  return absl::OkStatus();
}

absl::Status SlotMirror::Check(const engine::StepPlan& plan) {
  const int32_t S = limits_.sizes.max_slots;
  ++mark_;
  for (int32_t s : plan.releases) {
    if (s < 0 || s >= S) return Bad(plan, absl::StrCat("release of slot ", s, " out of range"));
    slots_[s].released = mark_;
  }
  for (int32_t s = 0; s < S; ++s) blocks_after_[s] = slots_[s].blocks;
  LLM_RETURN_IF_ERROR(CheckAdmissions(plan));
  LLM_RETURN_IF_ERROR(CheckGrants(plan));
  auto occupied = [&](int32_t s) {
    const Slot& x = slots_[s];
    return x.admitted == mark_ || (x.released != mark_ && x.request != nullptr);
  };
  // The prefix length of the request in slot `s` after this plan's admissions; -1 when free.
  auto prefix_in = [&](int32_t s) -> int64_t {
    if (slots_[s].admitted == mark_) {
      for (const auto& a : plan.admissions) {
        if (a.slot == s)
          return static_cast<int64_t>(a.request->prompt_ids.size() + a.resumed.size());
      }
    }
    if (!occupied(s)) return -1;
    return static_cast<int64_t>(slots_[s].request->prompt_ids.size() + slots_[s].resumed.size());
  };
  auto prompt_done = [&](int32_t s) {
    const Slot& x = slots_[s];
    return x.admitted != mark_ && x.released != mark_ && x.request != nullptr && x.sampled;
  };
  const int32_t bt = limits_.sizes.block_tokens;
  int32_t prefill_tokens = 0;
  for (const auto& p : plan.prefills) {
    if (p.slot < 0 || p.slot >= S) return Bad(plan, "prefill slot out of range");
    const int64_t prefix = prefix_in(p.slot);
    if (prefix < 0 || p.start < 0 || p.num_tokens < 1 || p.start + p.num_tokens > prefix ||
        int64_t{p.start} + p.num_tokens > int64_t{blocks_after_[p.slot]} * bt ||
        prompt_done(p.slot) || slots_[p.slot].prefilled == mark_) {
      return Bad(plan, absl::StrCat("bad prefill of slot ", p.slot));
    }
    slots_[p.slot].prefilled = mark_;
    prefill_tokens += p.num_tokens;
  }
  if (prefill_tokens > limits_.max_prefill_tokens) {
    return Bad(plan, absl::StrCat(prefill_tokens, " prompt tokens; the runner takes at most ",
                                  limits_.max_prefill_tokens));
  }
  for (const engine::DecodeChunk& d : plan.decodes) {
    const int32_t s = d.slot;
    if (d.max_draft < 0 || (d.max_draft > 0 && limits_.spec_group <= 1)) {
      return Bad(plan, absl::StrCat("decode of slot ", s, " with ", d.max_draft,
                                    " proposals: this runner does not speculate "
                                    "(engine.speculative.method is off)"));
    }
    if (s < 0 || s >= S || !prompt_done(s) || slots_[s].prefilled == mark_) {
      return Bad(plan, absl::StrCat("decode of slot ", s, ", which holds no prefilled request"));
    }
    if (slots_[s].decoded == mark_) return Bad(plan, absl::StrCat("decode of slot ", s, " twice"));
    if (int64_t{slots_[s].written} >= int64_t{blocks_after_[s]} * bt) {
      return Bad(plan, absl::StrCat("decode of slot ", s, " writes position ", slots_[s].written,
                                    " past its ", blocks_after_[s], " KV blocks"));
    }
    slots_[s].decoded = mark_;
  }
  checked_prefill_tokens_ = prefill_tokens;
  return absl::OkStatus();
}

void SlotMirror::Apply(const engine::StepPlan& plan, StepLayout& l) {
  ClearLayout(l);
  changed_rows_.clear();
  ApplySlots(plan, l);
  AssignDecodeRows(plan, l);
  // The batch.
  l.bucket = -1;
  for (size_t i = 0; rows_in_use_ > 0 && i < buckets_.size(); ++i) {
    if (buckets_[i] >= rows_in_use_) {
      l.bucket = static_cast<int32_t>(i);
      break;
    }
  }
  const int32_t bucket_rows = l.bucket < 0 ? 0 : buckets_[l.bucket];
  LayOutGroups(plan, bucket_rows, l);
  DecideCatchUp(plan, l);
  const int32_t B = bucket_rows * l.group;
  l.decode_rows = B;
  if (checked_prefill_tokens_ == 0) {
    l.rows = l.num_sample_rows = B;
    l.prefill_rows = 0;
    l.identity_sampling = true;
  } else {
    LayOutPrefill(plan, B, l);
  }
  // The slots that sample: the decodes and the prompts this step completes (which decode from
  // the next step on).
  l.argmax_only = true;
  for (const engine::DecodeChunk& d : plan.decodes) {
    l.argmax_only = l.argmax_only && slots_[d.slot].argmax_only;
  }
  for (const auto& p : plan.prefills) {
    if (!p.samples) continue;
    l.argmax_only = l.argmax_only && slots_[p.slot].argmax_only;
    slots_[p.slot].sampled = true;
    slots_[p.slot].written = p.start + p.num_tokens;
  }
  // One position a decode: with proposals, a lower bound (the device knows how many stood).
  for (const engine::DecodeChunk& d : plan.decodes) ++slots_[d.slot].written;
}

void SlotMirror::ClearLayout(StepLayout& l) {
  l.admits.clear();
  l.settings.clear();
  l.grants.clear();
  l.blocks.clear();
  l.row_changes.clear();
  l.prefill_slot.clear();
  l.prefill_pos.clear();
  l.prefill_token.clear();
  l.prefill_chunks.clear();
  l.prefill_tiles.clear();
  l.last_token_tiles.clear();
  l.chunk_samples.clear();
  l.sample_rows.clear();
  l.history_spans.clear();
  l.history_tokens.clear();
}

void SlotMirror::ChangeRow(int32_t row) {
  if (row_changed_[row] != mark_) {
    row_changed_[row] = mark_;
    changed_rows_.push_back(row);
  }
}

void SlotMirror::ApplySlots(const engine::StepPlan& plan, StepLayout& l) {
  for (int32_t s : plan.releases) {
    Slot& x = slots_[s];
    if (x.decode_row >= 0) {
      decode_rows_[x.decode_row] = -1;
      ChangeRow(x.decode_row);
    }
    x.request = nullptr;
    x.resumed.clear();
    x.blocks = x.written = 0;
    x.decode_row = -1;
    x.sampled = false;
  }
  for (const auto& a : plan.admissions) {
    Slot& x = slots_[a.slot];
    x.request = a.request;
    x.resumed = a.resumed;
    x.blocks = static_cast<int32_t>(a.blocks.size());
    x.written = 0;
    x.sampled = false;
    x.chunked = false;
    x.draft_lapsed = false;
    AddOracleSpan(a.slot, l);
    l.admits.push_back(kernels::SlotAdmit{
        a.slot, static_cast<int32_t>(a.blocks.size()), static_cast<int32_t>(l.blocks.size()),
        a.request->sampling.has_penalties() ? 1 : 0, static_cast<int32_t>(a.resumed.size())});
    l.settings.push_back(ToSlotSampling(*a.request));
    x.argmax_only = kernels::ArgmaxOnly(l.settings.back());
    l.blocks.insert(l.blocks.end(), a.blocks.begin(), a.blocks.end());
  }
  for (const engine::BlockGrant& g : plan.grants) {
    Slot& x = slots_[g.slot];
    l.grants.push_back(kernels::SlotGrant{g.slot, x.blocks, static_cast<int32_t>(g.blocks.size()),
                                          static_cast<int32_t>(l.blocks.size())});
    l.blocks.insert(l.blocks.end(), g.blocks.begin(), g.blocks.end());
    x.blocks += static_cast<int32_t>(g.blocks.size());
  }
}

void SlotMirror::AssignDecodeRows(const engine::StepPlan& plan, StepLayout& l) {
  // Slots that stopped decoding free theirs, new ones take the lowest free.
  for (int32_t row = 0; row < rows_in_use_; ++row) {
    const int32_t s = decode_rows_[row];
    if (s >= 0 && slots_[s].decoded != mark_) {
      decode_rows_[row] = -1;
      slots_[s].decode_row = -1;
      ChangeRow(row);
    }
  }
  int32_t free_row = 0;
  for (const engine::DecodeChunk& d : plan.decodes) {
    const int32_t s = d.slot;
    Slot& x = slots_[s];
    if (x.decode_row >= 0) continue;
    while (decode_rows_[free_row] >= 0) ++free_row;  // one is free: rows == slots
    x.decode_row = free_row;
    decode_rows_[free_row] = s;
    ChangeRow(free_row);
  }
  rows_in_use_ = 0;
  for (int32_t row = limits_.sizes.max_slots - 1; row >= 0; --row) {
    if (decode_rows_[row] >= 0) {
      rows_in_use_ = row + 1;
      break;
    }
  }
  for (int32_t row : changed_rows_) {
    l.row_changes.push_back(row);
    l.row_changes.push_back(decode_rows_[row]);
  }
}

void SlotMirror::LayOutPrefill(const engine::StepPlan& plan, int32_t decode_rows, StepLayout& l) {
  for (const auto& p : plan.prefills) {
    Slot& x = slots_[p.slot];
    if (!x.chunked) AddCachedSpan(p.slot, p.start, l);
    x.chunked = true;
    l.prefill_chunks.push_back(
        {static_cast<int32_t>(l.prefill_slot.size()), p.num_tokens, p.slot, p.start});
    for (int32_t i = 0; i < p.num_tokens; ++i) {
      l.prefill_slot.push_back(p.slot);
      l.prefill_pos.push_back(p.start + i);
      l.prefill_token.push_back(PrefixToken(x, p.start + i));
    }
    if (p.samples) l.sample_rows.push_back(static_cast<int32_t>(l.prefill_slot.size()) - 1);
    l.chunk_samples.push_back(p.samples ? 1 : 0);
  }
  kernels::PlanPrefillTiles(l.prefill_chunks, limits_.attention_group, l.prefill_tiles);
  kernels::SelectLastTokenTiles(l.prefill_chunks, l.chunk_samples, limits_.attention_group,
                                l.prefill_tiles, l.last_token_tiles);
  l.rows = RoundUp(checked_prefill_tokens_ + decode_rows, kPrefillRowAlign);
  l.prefill_rows = l.rows - decode_rows;
  l.prefill_slot.resize(l.prefill_rows, -1);  // padding rows
  l.prefill_pos.resize(l.prefill_rows, 0);
  l.prefill_token.resize(l.prefill_rows, 0);
  for (int32_t j = 0; j < decode_rows; ++j) l.sample_rows.push_back(l.prefill_rows + j);
  l.num_sample_rows = RoundUp(static_cast<int32_t>(l.sample_rows.size()), kSampleRowAlign);
  l.sample_rows.resize(l.num_sample_rows, -1);
  l.identity_sampling = false;
}

void SlotMirror::AddOracleSpan(int32_t slot, StepLayout& l) const {
  if (!limits_.oracle) return;
  // Output i sits at position prompt + i; a readmission's resumed outputs are its prefix (its
  // rows or its cached span write them), so the span starts after them. The kernel clears the
  // rest of the row, so the proposals end where the oracle (or the step's budget) does.
  const Slot& x = slots_[slot];
  const std::vector<int32_t>& oracle = x.request->oracle_ids;
  const auto done = std::min(x.resumed.size(), oracle.size());
  const auto pos = static_cast<int32_t>(x.request->prompt_ids.size() + x.resumed.size());
  if (pos >= limits_.max_context) return;
  const int32_t room = limits_.max_history_tokens - static_cast<int32_t>(l.history_tokens.size());
  const int32_t count = std::max(
      0, std::min({static_cast<int32_t>(oracle.size() - done), room, limits_.max_context - pos}));
  l.history_spans.push_back(
      kernels::HistorySpan{slot, pos, count, static_cast<int32_t>(l.history_tokens.size()), 0});
  l.history_tokens.insert(l.history_tokens.end(), oracle.begin() + done,
                          oracle.begin() + done + count);
}

void SlotMirror::AddCachedSpan(int32_t slot, int32_t start, StepLayout& l) const {
  const int32_t room = limits_.max_history_tokens - static_cast<int32_t>(l.history_tokens.size());
  const int32_t count = std::min(start, room);
  if (count <= 0) return;
  // The last `count` cached positions: they join the chunk's own in one searchable run.
  const int32_t from = start - count;
  l.history_spans.push_back(
      kernels::HistorySpan{slot, from, count, static_cast<int32_t>(l.history_tokens.size()), 1});
  for (int32_t pos = from; pos < start; ++pos) {
    l.history_tokens.push_back(PrefixToken(slots_[slot], pos));
  }
}

void SlotMirror::LayOutGroups(const engine::StepPlan& plan, int32_t bucket_rows,
                              StepLayout& l) const {
  l.group = 1;
  l.decode_draft.clear();
  l.decode_limit.clear();
  // A constrained slot's verify rows need masks along proposals the host has not seen: it
  // speculates only where the step copies them back (speculate_constrained).
  const auto allowance = [&](const engine::DecodeChunk& d) {
    if (!MaySpeculate(slots_[d.slot])) return 0;
    return std::min(d.max_draft, limits_.spec_group - 1);
  };
  int32_t most = 0;
  for (const engine::DecodeChunk& d : plan.decodes) most = std::max(most, allowance(d));
  if (most <= 0) return;
  int32_t group = limits_.spec_group;
  for (const int32_t g : SpeculativeGroups(limits_.spec_group)) {
    if (g - 1 >= most) {
      group = g;
      break;
    }
  }
  const int32_t capacity =
      limits_.max_decode_rows > 0 ? limits_.max_decode_rows : limits_.sizes.max_slots;
  if (int64_t{bucket_rows} * group > capacity) return;  // decodes without proposals
  l.group = group;
  l.decode_draft.assign(static_cast<size_t>(bucket_rows), 0);
  l.decode_limit.assign(static_cast<size_t>(bucket_rows), 0);
  for (const engine::DecodeChunk& d : plan.decodes) {
    const Slot& x = slots_[d.slot];
    l.decode_draft[x.decode_row] = std::min(allowance(d), group - 1);
    l.decode_limit[x.decode_row] = x.blocks * limits_.sizes.block_tokens;
  }
}

bool SlotMirror::MaySpeculate(const Slot& x) const {
  if (x.draft_lapsed || !x.request->speculate) return false;
  return limits_.speculate_constrained || x.request->constraint == nullptr;
}

void SlotMirror::DecideCatchUp(const engine::StepPlan& plan, StepLayout& l) {
  l.draft_catch_up = false;
  if (!limits_.draft || l.group != 1 || plan.decodes.empty()) return;
  bool needed = false;
  for (const engine::DecodeChunk& d : plan.decodes) needed = needed || MaySpeculate(slots_[d.slot]);
  l.draft_catch_up = needed && !plan.draft_may_lapse;
  if (l.draft_catch_up) return;
  for (const engine::DecodeChunk& d : plan.decodes) slots_[d.slot].draft_lapsed = true;
}

void SlotMirror::SampleRowSlots(const StepLayout& l, std::vector<int32_t>& slots,
                                std::vector<int32_t>& offsets) const {
  slots.assign(static_cast<size_t>(l.num_sample_rows), -1);
  offsets.assign(static_cast<size_t>(l.num_sample_rows), 0);
  for (int32_t i = 0; i < l.num_sample_rows; ++i) {
    const int32_t row = l.identity_sampling ? i : l.sample_rows[i];
    if (row < 0) continue;
    if (row < l.prefill_rows) {
      slots[i] = l.prefill_slot[row];
      continue;
    }
    // A verify group's row past its slot's allowance never samples (the device pads it).
    const int32_t d = (row - l.prefill_rows) / l.group, j = (row - l.prefill_rows) % l.group;
    slots[i] = j > 0 && j > l.decode_draft[d] ? -1 : decode_rows_[d];
    offsets[i] = j;
  }
}

}  // namespace llm::runner::cuda
