#include "worker/loop/constraint_compiler.h"

#include <numeric>

#include "worker/frontend/detokenizer.h"

namespace llm::loop {

std::vector<std::string> TokenBytesOf(const frontend::Tokenizer& tokenizer) {
  // In context after an anchor token: what each token adds inside a text, as a logprob entry
  // reports it (IncrementalDetokenizer::BytesOf), the vocabulary's context decoded once.
  std::vector<int32_t> anchor;
  if (auto a = tokenizer.TokenToId("a"); a && !tokenizer.IsSpecial(*a)) anchor.push_back(*a);
  const frontend::IncrementalDetokenizer context(tokenizer, anchor, /*skip_special_tokens=*/true);
  std::vector<int32_t> ids(static_cast<size_t>(tokenizer.vocab_size()));
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<std::string> bytes = context.BytesOf(ids);
  for (int32_t id : ids) {
    // Reached only by a pattern that names it (a tool call's marker).
    if (tokenizer.IsSpecial(id)) bytes[static_cast<size_t>(id)] = constraint::SpecialTokenBytes(id);
  }
  return bytes;
}

absl::StatusOr<std::shared_ptr<const constraint::CompiledConstraint>> ConstraintCompiler::Compile(
    const constraint::ConstraintSpec& spec) {
  std::call_once(table_once_, [&] {
    table_ = std::make_shared<const constraint::TokenTable>(TokenBytesOf(tokenizer_));
  });
  const std::string key = constraint::CacheKeyOf(spec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = by_pattern_.find(key); it != by_pattern_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: another request's compile does not wait for this one.
  auto compiled = constraint::Compile(spec, table_);
  if (!compiled.ok()) return compiled.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (by_pattern_.count(key) == 0) {
    lru_.emplace_back(key, *compiled);
    by_pattern_[key] = std::prev(lru_.end());
    bytes_ += (*compiled)->dfa_bytes();
    while (lru_.size() > 1 && (lru_.size() > kCacheEntries || bytes_ > kCacheBytes)) {
      bytes_ -= lru_.front().second->dfa_bytes();
      by_pattern_.erase(lru_.front().first);
      lru_.pop_front();
    }
  }
  return compiled;
}

}  // namespace llm::loop
