// A pushdown automaton over bytes, for grammars whose rules recurse (GBNF's `value ::= object |
// ...`, `object ::= "{" ... value ... "}"`): one ByteDfa per rule that recursion needs as its
// own automaton, in which a call to rule k is the bytes CallMarker(k) (bytes no UTF-8 text
// holds, and which a walk refuses from any token). Matching keeps a stack of frames (a rule and a
// state of its automaton); a call pushes the callee's start, a rule in an accepting state may
// return to its caller. A grammar may be ambiguous, so an output's position is a set of stacks.
// Pure logic; immutable once built, shared by every request of the same grammar.
//
// Token masks (TokenTable's trie, walked with sets of stacks) depend on the top of a stack
// only, until a token's bytes return out of it: a mask is computed per top kMaskFrames frames
// (FrameMaskOf) and kept by the caller, with the trie nodes at which the bytes may return
// below them; per use, only those subtrees are walked again, by the rest of the stack
// (MaskAt), and they are few (after a complete value: the bytes that close or separate).
#ifndef LLM_WORKER_CONSTRAINT_PUSHDOWN_H_
#define LLM_WORKER_CONSTRAINT_PUSHDOWN_H_

#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/constraint/byte_dfa.h"
#include "worker/constraint/token_table.h"

namespace llm::constraint {

// The bytes that stand for a call to rule `rule` inside a rule's pattern: 0xFD, the index in
// decimal, 0xFC. No UTF-8 text holds 0xFD or 0xFC; a byte-level vocabulary's tokens for them
// never match, because a walk refuses both bytes.
std::string CallMarker(int32_t rule);
// The rules `pattern` calls, in the order written (repeats included).
std::vector<int32_t> CallsIn(std::string_view pattern);
// `pattern` with each call to rule k made a call to rule to[k] (k < to.size()): to put one
// grammar's rules after another's, or drop rules.
std::string RenumberCalls(std::string_view pattern, std::span<const int32_t> to);

// The patterns of a grammar's rules; patterns[0] is the output's (the root). Without
// `calls`, patterns[0] is the whole language and the only pattern (no rule recurses).
struct RulePatterns {
  std::vector<std::string> names;
  std::vector<std::string> patterns;
  bool calls = false;
};
// `rules` without those no chain of calls from the root reaches (a branch a bound left out),
// renumbered; `calls` false when only the root is left.
RulePatterns DropUncalledRules(RulePatterns rules);

struct Frame {
  int32_t rule = 0, state = 0;
  friend bool operator==(const Frame&, const Frame&) = default;
  friend auto operator<=>(const Frame&, const Frame&) = default;
};
// The rules being matched, outermost first; the last frame takes the next byte.
using Stack = std::vector<Frame>;
// The stacks an output's bytes may have reached, sorted and unique; empty: the output left
// the language (or outgrew the limits below).
using StackSet = std::vector<Stack>;

// A mask over the vocabulary for the top frames of a stack: `words` has the tokens allowed
// whatever lies below them; `returns` the trie nodes (TokenTable) whose byte the frames below
// may take next, when the top ones have returned; `overflow`: a walk went past the limits, and
// the whole stack decides each use.
struct FrameMask {
  std::vector<uint64_t> words;
  std::vector<uint32_t> returns;
  bool overflow = false;
};

class Pushdown {
 public:
  // Limits per output: stacks in a set (ambiguity) and frames in a stack (nesting). A byte or
  // call that would leave a frame unable to close within kMaxDepth is not taken (the mask
  // leaves out what would open another level), so an output at the limit can still end; a
  // set that grows past kMaxStacks has left what the matcher follows (the mask leaves out
  // the token).
  static constexpr size_t kMaxStacks = 64;
  static constexpr size_t kMaxDepth = 1000;
  // Frames a cached mask depends on.
  static constexpr size_t kMaskFrames = 2;

  // Each pattern (byte_regex.h, extensions allowed) into an automaton, `max_states` over all.
  // INVALID_ARGUMENT "<field>: rule 'name': ..." for a rule that never ends (each of its
  // expansions calls itself again) or that may begin with itself (left recursion: write the
  // repetition with `*` or `+`).
  static absl::StatusOr<Pushdown> Build(const RulePatterns& rules, size_t max_states,
                                        std::string_view field);

  size_t num_states() const;  // over every rule's automaton
  size_t bytes() const;       // their transition tables

  StackSet Start() const { return {Stack{Frame{0, 0}}}; }
  // The stacks after `bytes`; empty when they leave the language or a limit.
  StackSet Walk(const StackSet& from, std::string_view bytes) const;
  // The output so far is in the language.
  bool Complete(const StackSet& set) const;
  // `text` is in the language (tests).
  bool Accepts(std::string_view text) const { return Complete(Walk(Start(), text)); }

  // The mask of `top`, the last frames of a stack (`whole`: nothing lies below them).
  FrameMask FrameMaskOf(const Stack& top, bool whole, const TokenTable& tokens) const;
  // Sets in `words` the tokens `stack` takes, given `top`, the FrameMask of its last
  // kMaskFrames frames: its words, and the tokens under its returns that the frames below
  // take.
  void MaskAt(const Stack& stack, const FrameMask& top, const TokenTable& tokens,
              std::span<uint64_t> words) const;
  // A stack `depth` frames deep is close enough to kMaxDepth that a token (of at most
  // `max_token_bytes`) could meet the limit: its mask must be WholeMaskAt's. Before each byte
  // (and after the last) a stack grows by at most max_entry_ frames.
  bool NearLimit(size_t depth, int max_token_bytes) const;
  // Sets in `words` the tokens the whole set takes, in one walk of the trie with all of it: what
  // Walk does, limits included (several stacks, a stack near kMaxDepth).
  void WholeMaskAt(const StackSet& set, const TokenTable& tokens, std::span<uint64_t> words) const;

 private:
  struct Call {
    int32_t rule, ret;
  };
  class Arena;
  class Walker;
  friend class Arena;
  friend class Walker;

  const std::vector<Call>& CallsAt(Frame f) const {
    return calls_[static_cast<size_t>(f.rule)][static_cast<size_t>(f.state)];
  }
  // A call whose return is the caller's end (accepting, nothing after): the caller's frame is
  // dropped, so that `value ::= object` does not grow the stack.
  bool IsTail(Frame f, const Call& c) const;
  // Refuses rules that never end and left recursion; sets max_entry_.
  absl::Status CheckRules(std::string_view field);
  void ComputeNeeds();
  uint32_t Need(Frame f) const {
    return need_[static_cast<size_t>(f.rule)][static_cast<size_t>(f.state)];
  }
  static constexpr uint32_t kNever = uint32_t{1} << 30;

  std::vector<ByteDfa> dfas_;
  std::vector<std::string> names_;
  std::vector<std::vector<std::vector<Call>>> calls_;  // [rule][state]
  // [rule][state]: TokenTable::UniformClasses of the state's automaton (a walk's config takes
  // a class alike where every state it may reach without a byte does).
  std::vector<std::vector<uint64_t>> uniform_;
  // [rule][state]: the fewest frames above the state's own that ending its rule needs (kNever:
  // it cannot end), so that a stack near kMaxDepth keeps only frames that can still close.
  std::vector<std::vector<uint32_t>> need_;
  uint32_t max_need_ = 0;
  // The most frames the calls entered from a rule's start add, its own included (at least 1).
  size_t max_entry_ = 1;
};

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_PUSHDOWN_H_
