// Compiles requests' constraints (structured output) for one worker: the vocabulary as bytes,
// built from the tokenizer at the first constrained request, and the compiled constraints of
// recent requests by pattern, so a client that sends the same schema or regex again does not
// pay its compile time again. Thread-safe (Worker::Submit calls it from any thread).
#ifndef LLM_WORKER_LOOP_CONSTRAINT_COMPILER_H_
#define LLM_WORKER_LOOP_CONSTRAINT_COMPILER_H_

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "worker/constraint/constraint.h"
#include "worker/frontend/tokenizer.h"

namespace llm::loop {

// Each token's bytes as it stands inside a text (after a plain anchor token, so a word's
// leading space is kept); constraint::SpecialTokenBytes for special tokens.
std::vector<std::string> TokenBytesOf(const frontend::Tokenizer& tokenizer);

class ConstraintCompiler {
 public:
  // Compiled constraints kept: at most this many, and automata of at most kCacheBytes in all
  // (each also keeps up to CompiledConstraint::kMaxMaskBytes of masks).
  static constexpr size_t kCacheEntries = 64;
  static constexpr size_t kCacheBytes = size_t{256} << 20;

  explicit ConstraintCompiler(const frontend::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // INVALID_ARGUMENT naming the field for a constraint that does not compile.
  absl::StatusOr<std::shared_ptr<const constraint::CompiledConstraint>> Compile(
      const constraint::ConstraintSpec& spec);

 private:
  const frontend::Tokenizer& tokenizer_;
  std::once_flag table_once_;
  std::shared_ptr<const constraint::TokenTable> table_;
  std::mutex mu_;
  // Least recently used first.
  std::list<std::pair<std::string, std::shared_ptr<const constraint::CompiledConstraint>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> by_pattern_;
  size_t bytes_ = 0;  // automata in the cache
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_CONSTRAINT_COMPILER_H_
