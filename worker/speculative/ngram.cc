#include "worker/speculative/ngram.h"

#include <algorithm>

namespace llm::speculative {

int32_t ProposeNgram(std::span<const int32_t> history, const NgramOptions& options,
                     int32_t max_tokens, std::vector<int32_t>& out) {
  const auto len = static_cast<int64_t>(history.size());
  if (max_tokens <= 0) return 0;
  for (int64_t n = std::min<int64_t>(options.max, len - 1); n >= options.min; --n) {
    const std::span<const int32_t> suffix = history.subspan(static_cast<size_t>(len - n));
    // The latest start i < len - n whose n tokens equal the suffix (it may overlap the
    // suffix) and that max_tokens tokens follow; failing that, the one most tokens follow.
    int64_t best = -1, best_count = 0;
    for (int64_t i = len - n - 1; i >= 0 && best_count < max_tokens; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + i)) continue;
      const int64_t count = std::min<int64_t>(max_tokens, len - (i + n));
      if (count > best_count) {
        best = i;
        best_count = count;
      }
    }
    if (best >= 0) {
      const auto from = history.begin() + best + n;
      out.insert(out.end(), from, from + best_count);
      return static_cast<int32_t>(best_count);
    }
  }
  return 0;
}

}  // namespace llm::speculative
