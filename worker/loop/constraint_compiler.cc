#include "worker/loop/constraint_compiler.h"

namespace llm::loop {

std::vector<std::string> TokenBytesOf(const frontend::Tokenizer& tokenizer) {
  const int32_t vocab = tokenizer.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  // An anchor before each token keeps the leading space a decoder strips at a text's start.
  std::optional<int32_t> anchor = tokenizer.TokenToId("a");
  std::string anchor_bytes;
  if (anchor) {
    auto b = tokenizer.DecodeBytes(std::vector<int32_t>{*anchor}, true);
    if (b.ok() && !b->empty()) {
      anchor_bytes = *b;
    } else {
      anchor.reset();
    }
  }
  for (int32_t id = 0; id < vocab; ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    if (anchor) {
      auto b = tokenizer.DecodeBytes(std::vector<int32_t>{*anchor, id}, true);
      if (b.ok() && b->size() > anchor_bytes.size() && b->rfind(anchor_bytes, 0) == 0) {
        bytes[static_cast<size_t>(id)] = b->substr(anchor_bytes.size());
        continue;
      }
    }
    auto b = tokenizer.DecodeBytes(std::vector<int32_t>{id}, true);
    if (b.ok()) bytes[static_cast<size_t>(id)] = *b;
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
