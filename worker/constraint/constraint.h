// A request's constraint on its output (structured output): what the client asked for, and the
// compiled form the sampler enforces. The output's bytes must be a prefix of the language while
// it is generated, and in it when the request ends by a stop token (EOS). Pure logic.
//
// Kinds (GenerateRequest.constraint; the OpenAI front maps response_format and vLLM's
// structured_outputs onto them):
//   regex        the whole output matches the pattern (byte_regex.h's syntax);
//   choice       the output is one of the strings;
//   json_object  any JSON object (compact: no whitespace between tokens; nested as deep as
//                it goes, a pushdown automaton);
//   json_schema  compact JSON that validates against the schema (json_schema.h says which
//                keywords are supported);
//   grammar      the output is the root rule of a GBNF grammar (gbnf.h).
// Every kind compiles to a byte regex, then to one automaton; json_object and a grammar whose
// rules recurse to one automaton per recursive rule, matched with a stack (pushdown.h).
#ifndef LLM_WORKER_CONSTRAINT_CONSTRAINT_H_
#define LLM_WORKER_CONSTRAINT_CONSTRAINT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/constraint/byte_dfa.h"
#include "worker/constraint/pushdown.h"
#include "worker/constraint/token_table.h"

namespace llm::constraint {

enum class Kind : uint8_t { kNone, kRegex, kChoice, kJsonObject, kJsonSchema, kGrammar };

struct ConstraintSpec {
  Kind kind = Kind::kNone;
  std::string text;  // kRegex: the pattern; kJsonSchema: the schema (JSON); kGrammar: GBNF
  std::vector<std::string> choices;  // kChoice
  // kRegex built by the worker (a tool call's grammar), in place of `text`: the patterns
  // themselves, which may use byte_regex.h's extensions and call each other (pushdown.h); a
  // client's regex may do neither.
  RulePatterns built;

  bool enabled() const { return kind != Kind::kNone; }
  bool worker_built() const { return !built.patterns.empty(); }
};

// Automaton states a constraint may need (bounds compile time and memory per request).
inline constexpr size_t kMaxDfaStates = 20000;

// The patterns a spec compiles to (one, without calls, but for a recursive grammar);
// INVALID_ARGUMENT naming the field (a schema's path).
absl::StatusOr<RulePatterns> PatternsOf(const ConstraintSpec& spec);
// What identifies a spec in a cache of compiled constraints.
std::string CacheKeyOf(const ConstraintSpec& spec);

// A token mask: bit t of word t / 64 set when token t may come next.
using TokenMask = std::vector<uint64_t>;

// Where an output stands in a compiled constraint: a state of its automaton, or the stacks of
// a pushdown one.
struct Position {
  int32_t state = 0;
  StackSet stacks;
};

// Compiled: the automaton of the output's bytes (or a pushdown automaton, for a grammar whose
// rules recurse), the vocabulary it is matched against, and the masks of the states visited
// so far, shared by every request of this constraint (a state's mask is computed once per
// worker, not once per request). Thread-safe.
class CompiledConstraint {
 public:
  CompiledConstraint(ByteDfa dfa, std::shared_ptr<const TokenTable> tokens);
  CompiledConstraint(Pushdown pda, std::shared_ptr<const TokenTable> tokens);

  bool pushdown() const { return pda_ != nullptr; }
  const ByteDfa& dfa() const { return dfa_; }  // without pushdown()
  const TokenTable& tokens() const { return *tokens_; }
  // Masks kept per constraint at most; past it, a new state's mask is computed per use.
  static constexpr size_t kMaxMaskBytes = size_t{16} << 20;

  Position Start() const;
  // Moves `p` past `bytes`; false (and `p` dead) when they leave the language.
  bool Walk(Position& p, std::string_view bytes) const;
  bool Dead(const Position& p) const;
  bool Accepting(const Position& p) const;  // the output so far is in the language
  // The tokens that may follow `p` (stop ids aside).
  std::shared_ptr<const TokenMask> MaskAt(const Position& p) const;

  // The mask of `state` (without pushdown()): computed at its first use (a walk over the
  // vocabulary's class trie, TokenTable::MaskByClass), then kept (within kMaxMaskBytes).
  std::shared_ptr<const TokenMask> MaskOf(int32_t state) const;
  // A pushdown constraint's mask for the top frames of `stack` (Pushdown::kMaskFrames),
  // computed at their first use and kept like MaskOf's.
  std::shared_ptr<const FrameMask> FrameMaskOf(const Stack& stack) const;
  size_t num_states() const { return pda_ ? pda_->num_states() : dfa_.num_states(); }
  // The automaton's memory (its transition table).
  size_t dfa_bytes() const {
    return pda_ ? pda_->bytes()
                : dfa_.num_states() * (256 * sizeof(int32_t) + sizeof(uint64_t));  // uniform_
  }

 private:
  // Counts `bytes` of masks kept; false (keep nothing) past kMaxMaskBytes. Under mu_.
  bool Keep(size_t bytes) const;

  ByteDfa dfa_;
  std::unique_ptr<const Pushdown> pda_;
  std::shared_ptr<const TokenTable> tokens_;
  // Per state, bit c set when every byte of TokenTable class c leads to the same next state;
  // 0 until a walk first reaches the state.
  std::unique_ptr<std::atomic<uint64_t>[]> uniform_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const TokenMask>> masks_;  // per state
  mutable std::map<std::string, std::shared_ptr<const FrameMask>> frame_masks_;
  mutable size_t mask_bytes_ = 0;
};

// INVALID_ARGUMENT naming the field ("constraint.regex: ...", "constraint.choice[2]: ...").
absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(
    const ConstraintSpec& spec, std::shared_ptr<const TokenTable> tokens);

// One request's position in its constraint. Not thread-safe (the runner's slot owns it).
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledConstraint> constraint);

  // Sets every logit the constraint forbids to -inf: tokens whose bytes leave the language,
  // and `stop_ids` unless the output so far is in it. Where nothing else may follow a complete
  // output, only `stop_ids` remain.
  void Apply(std::span<float> logits, std::span<const int32_t> stop_ids);
  // The mask Apply applies, as bits: bit t of words[t / 64] set when token t may come next,
  // over ids [0, 64 * words.size()) (ids the vocabulary does not have are clear). Apply is
  // this and ApplyTokenMask; a backend that samples elsewhere (the CUDA sampler) uploads it.
  void WriteMask(std::span<uint64_t> words, std::span<const int32_t> stop_ids) const;
  // Moves past `token`; false when the constraint forbids it (its bytes left the language).
  bool Advance(int32_t token);
  // How many of `tokens`, from the first, could follow one another from here without the
  // constraint refusing one (a stop id only where the output before it is complete, and
  // nothing after it). Moves nothing.
  size_t AllowedPrefix(std::span<const int32_t> tokens, std::span<const int32_t> stop_ids) const;
  bool complete() const;  // the output so far is in the language
  bool failed() const { return c_->Dead(pos_); }

 private:
  std::shared_ptr<const CompiledConstraint> c_;
  Position pos_;
  std::vector<uint64_t> scratch_;  // Apply's mask
};

// Words of a mask over `vocab` ids.
inline size_t MaskWords(int64_t vocab) { return static_cast<size_t>((vocab + 63) / 64); }

// Sets logits[t] to -inf where bit t of `words` is clear (ids past the words' end too). The
// CPU reference of the CUDA sampler's mask (kernels/sampling/sampling.h).
void ApplyTokenMask(std::span<float> logits, std::span<const uint64_t> words);

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_CONSTRAINT_H_
