#include "worker/constraint/byte_dfa.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace llm::constraint {
namespace {

constexpr size_t kMaxWork = 4'000'000;

// The epsilon closure of `set`, sorted.
void Close(const ByteNfa& nfa, std::vector<int32_t>& set, std::vector<uint8_t>& seen) {
  std::vector<int32_t> stack(set.begin(), set.end());
  for (int32_t s : set) seen[static_cast<size_t>(s)] = 1;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t t : nfa.states[static_cast<size_t>(s)].eps) {
      if (seen[static_cast<size_t>(t)]) continue;
      seen[static_cast<size_t>(t)] = 1;
      set.push_back(t);
      stack.push_back(t);
    }
  }
  for (int32_t s : set) seen[static_cast<size_t>(s)] = 0;
  std::sort(set.begin(), set.end());
}

std::string KeyOf(const std::vector<int32_t>& set) {
  return std::string(reinterpret_cast<const char*>(set.data()), set.size() * sizeof(int32_t));
}

}  // namespace

absl::StatusOr<ByteDfa> ByteDfa::Build(const ByteNfa& nfa, size_t max_states,
                                       std::string_view field) {
  ByteDfa dfa;
  std::vector<uint8_t> seen(nfa.states.size(), 0);
  std::vector<std::vector<int32_t>> sets;
  std::unordered_map<std::string, int32_t> ids;
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    Close(nfa, set, seen);
    std::string key = KeyOf(set);
    if (auto it = ids.find(key); it != ids.end()) return it->second;
    const auto id = static_cast<int32_t>(sets.size());
    ids.emplace(std::move(key), id);
    sets.push_back(std::move(set));
    return id;
  };
  intern({nfa.start});
  std::vector<int32_t> targets;
  std::vector<int> cuts;  // run boundaries of the current set's edges
  // NFA states looked at, over all DFA states: bounds the compile time of a pattern whose
  // automaton is small but whose state sets are huge.
  size_t work = 0;
  for (size_t d = 0; d < sets.size(); ++d) {
    work += sets[d].size();
    if (work > kMaxWork) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(field), ": the constraint is too complex to compile (more than ",
                       kMaxWork, " automaton steps); simplify it"));
    }
    if (sets.size() > max_states) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(field), ": the constraint needs more than ", max_states,
          " automaton states (alternations of long repetitions multiply them); simplify it"));
    }
    dfa.next_.resize((d + 1) * 256, kDead);
    const std::vector<int32_t> set = sets[d];  // a copy: intern may grow `sets`
    bool accepting = false, exits = false;
    for (int32_t s : set) accepting = accepting || s == nfa.accept;
    // The set's edges cut the bytes into runs that lead to the same targets: one intern per
    // run, not per byte (a string's content state has a few dozen runs, not 256 bytes).
    cuts.assign(1, 0);
    for (int32_t s : set) {
      for (const auto& e : nfa.states[static_cast<size_t>(s)].edges) {
        cuts.push_back(e.lo);
        cuts.push_back(e.hi + 1);
      }
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    cuts.push_back(256);
    for (size_t r = 0; r + 1 < cuts.size() && cuts[r] < 256; ++r) {
      const int lo = cuts[r], hi = cuts[r + 1] - 1;  // every byte of [lo, hi] alike
      targets.clear();
      for (int32_t s : set) {
        for (const auto& e : nfa.states[static_cast<size_t>(s)].edges) {
          if (lo >= e.lo && lo <= e.hi) targets.push_back(e.to);
        }
      }
      if (targets.empty()) continue;
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      const int32_t to = intern(targets);
      std::fill(dfa.next_.begin() + static_cast<std::ptrdiff_t>(d * 256 + lo),
                dfa.next_.begin() + static_cast<std::ptrdiff_t>(d * 256 + hi + 1), to);
      exits = true;
    }
    dfa.accepting_.push_back(accepting ? 1 : 0);
    dfa.exits_.push_back(exits ? 1 : 0);
  }
  if (!dfa.Trim()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(field), ": no output satisfies the constraint"));
  }
  return dfa;
}

bool ByteDfa::Trim() {
  const size_t n = accepting_.size();
  // Each state's distinct successors, reversed.
  std::vector<std::vector<int32_t>> preds(n);
  std::vector<int32_t> succ;
  for (size_t d = 0; d < n; ++d) {
    succ.assign(next_.begin() + static_cast<std::ptrdiff_t>(d * 256),
                next_.begin() + static_cast<std::ptrdiff_t>(d * 256 + 256));
    std::sort(succ.begin(), succ.end());
    succ.erase(std::unique(succ.begin(), succ.end()), succ.end());
    for (int32_t t : succ) {
      if (t != kDead) preds[static_cast<size_t>(t)].push_back(static_cast<int32_t>(d));
    }
  }
  std::vector<uint8_t> live(accepting_);
  std::vector<int32_t> stack;
  for (size_t d = 0; d < n; ++d) {
    if (live[d]) stack.push_back(static_cast<int32_t>(d));
  }
  while (!stack.empty()) {
    const int32_t t = stack.back();
    stack.pop_back();
    for (int32_t p : preds[static_cast<size_t>(t)]) {
      if (live[static_cast<size_t>(p)]) continue;
      live[static_cast<size_t>(p)] = 1;
      stack.push_back(p);
    }
  }
  for (size_t d = 0; d < n; ++d) {
    bool exits = false;
    for (size_t b = 0; b < 256; ++b) {
      int32_t& t = next_[d * 256 + b];
      if (t != kDead && !live[static_cast<size_t>(t)]) t = kDead;
      exits = exits || t != kDead;
    }
    exits_[d] = exits ? 1 : 0;
  }
  return live[0] != 0;
}

int32_t ByteDfa::Walk(int32_t state, std::string_view bytes) const {
  for (char c : bytes) {
    if (state == kDead) return kDead;
    state = Next(state, static_cast<uint8_t>(c));
  }
  return state;
}

}  // namespace llm::constraint
