#include "worker/frontend/added_tokens.h"

#include <algorithm>

#include "worker/frontend/unicode.h"

namespace llm::frontend {

AddedTokenMatcher::AddedTokenMatcher(std::vector<std::string> patterns,
                                     std::vector<AddedToken> tokens)
    : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.empty()) continue;
    first_byte_[static_cast<uint8_t>(p[0])] = true;
    int32_t node = 0;
    for (char c : p) {
      const auto b = static_cast<uint8_t>(c);
      int32_t child = Child(node, b);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& next = nodes_[node].next;
        next.insert(std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1})),
                    {b, child});
      }
      node = child;
    }
    // With duplicate patterns the first token wins.
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(i);
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t byte) const {
  const auto& next = nodes_[node].next;
  const auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(byte, int32_t{-1}));
  return it != next.end() && it->first == byte ? it->second : -1;
}

std::vector<Segment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<Segment> out;
  size_t start_offset = 0;  // end of the last emitted token
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    // Longest pattern starting at pos.
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = Child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = i + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[best];
    size_t begin = pos, end = best_end;
    if (tok.single_word) {
      const bool word_before = begin > 0 && IsWordChar(LastChar(text.substr(0, begin)));
      const bool word_after = end < text.size() && IsWordChar(FirstChar(text.substr(end)));
      if (word_before || word_after) {
        ++pos;
        continue;
      }
    }
    if (tok.lstrip) {
      begin = std::max(WhitespaceSuffixStart(text.substr(0, begin)), start_offset);
    }
    if (tok.rstrip) end += WhitespacePrefixEnd(text.substr(end));
    if (begin > start_offset) out.push_back(Segment{start_offset, begin, -1});
    out.push_back(Segment{begin, end, tok.id});
    start_offset = end;
    pos = end;
  }
  if (start_offset < text.size()) out.push_back(Segment{start_offset, text.size(), -1});
  return out;
}

}  // namespace llm::frontend
