#include "worker/runner/slot_constraints.h"

#include <algorithm>
#include <chrono>

namespace llm::runner {

SlotConstraints::SlotConstraints(int32_t max_slots, int32_t vocab, int threads, int32_t max_rows)
    : slots_(static_cast<size_t>(max_slots)),
      words_(constraint::MaskWords(vocab)),
      pool_(threads, std::chrono::microseconds{0}) {
  todo_.reserve(static_cast<size_t>(std::max(max_slots, max_rows)));
}

void SlotConstraints::OnPlan(const engine::StepPlan& plan) {
  for (int32_t s : plan.releases) {
    if (s < 0 || static_cast<size_t>(s) >= slots_.size()) continue;
    if (slots_[s].matcher != nullptr) --active_;
    slots_[s] = Slot{};
  }
  for (const engine::SlotAdmission& a : plan.admissions) {
    if (a.slot < 0 || static_cast<size_t>(a.slot) >= slots_.size()) continue;
    Slot& slot = slots_[a.slot];
    if (slot.matcher != nullptr) --active_;
    slot = Slot{};
    if (a.request == nullptr || !a.request->constraint) continue;
    slot.matcher = std::make_unique<constraint::Matcher>(a.request->constraint);
    slot.key = a.request->key;
    slot.since_step = plan.step_id;
    slot.stop_ids = a.request->stop_token_ids;
    for (int32_t token : a.resumed) slot.matcher->Advance(token);
    ++active_;
  }
}

SlotConstraints::LaunchMasks SlotConstraints::OnLaunch(uint64_t step_id, uint64_t oldest_in_flight,
                                                       std::span<const int32_t> row_slots) {
  LaunchMasks m;
  for (int32_t s : row_slots) {
    if (s < 0 || static_cast<size_t>(s) >= slots_.size() || !constrained(s)) continue;
    m.masked = true;
    const std::optional<uint64_t>& last = slots_[s].last_sampled;
    m.ready = m.ready && (!last.has_value() || *last < oldest_in_flight);
    slots_[s].last_sampled = step_id;
  }
  return m;
}

void SlotConstraints::OnToken(uint64_t step_id, int32_t slot, uint64_t key, int32_t token,
                              sampling::FinishReason finish) {
  if (slot < 0 || static_cast<size_t>(slot) >= slots_.size()) return;
  Slot& s = slots_[slot];
  if (s.matcher == nullptr || s.key != key || step_id < s.since_step) return;
  if (finish == sampling::FinishReason::kStopToken) return;
  s.matcher->Advance(token);
}

int32_t SlotConstraints::WriteMasks(std::span<const int32_t> row_slots,
                                    std::span<int32_t> mask_index, std::span<uint64_t> masks) {
  return WriteGroupMasks(row_slots, {}, Proposals{}, mask_index, masks);
}

int32_t SlotConstraints::WriteGroupMasks(std::span<const int32_t> row_slots,
                                         std::span<const int32_t> row_offset,
                                         const Proposals& proposals, std::span<int32_t> mask_index,
                                         std::span<uint64_t> masks) {
  todo_.clear();
  for (size_t i = 0; i < row_slots.size(); ++i) {
    const int32_t s = row_slots[i];
    const bool has = s >= 0 && static_cast<size_t>(s) < slots_.size() && constrained(s);
    mask_index[i] = has ? static_cast<int32_t>(todo_.size()) : -1;
    if (has) todo_.push_back(static_cast<int32_t>(i));
  }
  if (todo_.size() * words_ > masks.size()) return -1;
  // A row's proposals before it: none for a group's first row (or without groups); a row
  // past the slot's proposals (or the copy) is left unreachable by an impossible run.
  const auto run_of = [&](int32_t i, int32_t slot, bool& reachable) {
    reachable = true;
    const int32_t j = row_offset.empty() ? 0 : row_offset[i];
    if (j <= 0) return std::span<const int32_t>();
    const auto base = static_cast<size_t>(slot) * static_cast<size_t>(proposals.stride);
    reachable = j <= proposals.stride && static_cast<size_t>(slot) < proposals.counts.size() &&
                j <= proposals.counts[slot] && base + j <= proposals.tokens.size();
    return reachable ? proposals.tokens.subspan(base, static_cast<size_t>(j))
                     : std::span<const int32_t>();
  };
  // A mask is a lookup and a copy where its state was seen before, a walk of the vocabulary's
  // trie where not: a few rows per thread.
  pool_.ParallelFor(todo_.size(), 4, [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      const int32_t i = todo_[k];
      bool reachable = true;
      const std::span<const int32_t> run = run_of(i, row_slots[i], reachable);
      if (!reachable) {
        mask_index[i] = -1;
        continue;
      }
      WriteRowMask(row_slots[i], run, masks.subspan(k * words_, words_), mask_index[i]);
    }
  });
  return static_cast<int32_t>(todo_.size());
}

void SlotConstraints::WriteRowMask(int32_t slot, std::span<const int32_t> run,
                                   std::span<uint64_t> mask, int32_t& mask_index) const {
  const Slot& s = slots_[slot];
  if (run.empty()) {
    s.matcher->WriteMask(mask, s.stop_ids);
    return;
  }
  // One walk along the run: a stop id ends the request, a refused token cannot stand; either
  // way verification never reaches this row.
  constraint::Matcher m = *s.matcher;
  for (int32_t t : run) {
    if (std::find(s.stop_ids.begin(), s.stop_ids.end(), t) != s.stop_ids.end() || !m.Advance(t)) {
      mask_index = -1;
      return;
    }
  }
  m.WriteMask(mask, s.stop_ids);
}

}  // namespace llm::runner
