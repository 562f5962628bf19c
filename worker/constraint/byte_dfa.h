// A deterministic automaton over bytes, built from a ByteNfa by subset construction at compile
// time (so a pattern too large fails the request before it takes a slot, never mid-stream).
// Immutable once built; shared by every request of the same constraint.
#ifndef LLM_WORKER_CONSTRAINT_BYTE_DFA_H_
#define LLM_WORKER_CONSTRAINT_BYTE_DFA_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/constraint/byte_regex.h"

namespace llm::constraint {

class ByteDfa {
 public:
  static constexpr int32_t kDead = -1;

  // INVALID_ARGUMENT "<field>: ..." when more than `max_states` states are needed, or when
  // the language is empty. Every byte that leads to a state from which no accepting state can
  // be reached leads to kDead instead, so a walk that is not dead can always still complete
  // (a mask never lets an output into a dead end, as a length group's copies would).
  static absl::StatusOr<ByteDfa> Build(const ByteNfa& nfa, size_t max_states,
                                       std::string_view field);

  int32_t start() const { return 0; }
  int32_t Next(int32_t state, uint8_t byte) const {
    return next_[static_cast<size_t>(state) * 256 + byte];
  }
  // kDead when `bytes` leave the language's prefixes.
  int32_t Walk(int32_t state, std::string_view bytes) const;
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // Some byte leads on from `state` (else only the end may follow).
  bool has_exits(int32_t state) const { return exits_[static_cast<size_t>(state)] != 0; }
  size_t num_states() const { return accepting_.size(); }

 private:
  // Sends every byte into a state that cannot reach acceptance to kDead; false when the
  // start is such a state (the language is empty).
  bool Trim();

  std::vector<int32_t> next_;  // [state][256]
  std::vector<uint8_t> accepting_;
  std::vector<uint8_t> exits_;
};

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_BYTE_DFA_H_
