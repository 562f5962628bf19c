// Streaming parsers' hold-back: how much of a stream's end may be the start of a marker, and so
// must wait for the next piece before it is passed on.
#ifndef LLM_WORKER_TOOLS_PARTIAL_MARKER_H_
#define LLM_WORKER_TOOLS_PARTIAL_MARKER_H_

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace llm::tools {

// The length of the longest end of `s` that is a proper start of `marker` (0: none).
inline size_t PartialMarkerAtEnd(std::string_view s, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace llm::tools

#endif  // LLM_WORKER_TOOLS_PARTIAL_MARKER_H_
