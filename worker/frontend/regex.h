// A compiled PCRE2 regular expression (UTF-8, Unicode properties, JIT when available) with the
// syntax Hugging Face tokenizer.json files use (Oniguruma-compatible for those patterns).
#ifndef LLM_WORKER_FRONTEND_REGEX_H_
#define LLM_WORKER_FRONTEND_REGEX_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::frontend {

// Immutable after Compile; FindAll may be called from several threads at once.
class Regex {
 public:
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches, left to right, as [begin, end) byte offsets. An empty match
  // advances by one character. `text` must be valid UTF-8.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code*
};

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_REGEX_H_
