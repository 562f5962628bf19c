#include "worker/frontend/detokenizer.h"

#include <algorithm>

#include "common/utf8.h"

namespace llm::frontend {
namespace {

// Prompt tokens kept as decoding context.
constexpr size_t kPromptContextTokens = 6;

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= kReplacementChar.size() &&
         s.compare(s.size() - kReplacementChar.size(), kReplacementChar.size(), kReplacementChar) ==
             0;
}

// Length of the longest common prefix of a and b, cut back to a character boundary of b.
size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  while (n > 0 && n < b.size() && (static_cast<uint8_t>(b[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               std::span<const int32_t> prompt_ids,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {
  const size_t keep = std::min(prompt_ids.size(), kPromptContextTokens);
  ids_.assign(prompt_ids.end() - keep, prompt_ids.end());
  prefix_offset_ = 0;
  read_offset_ = ids_.size();
}

std::string IncrementalDetokenizer::DecodeRange(size_t begin, size_t end) const {
  std::vector<int32_t> window;
  window.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    if (ids_[i] >= 0 && ids_[i] < tokenizer_.vocab_size()) window.push_back(ids_[i]);
  }
  auto text = tokenizer_.Decode(window, skip_special_);
  return text.ok() ? *std::move(text) : std::string();
}

std::string IncrementalDetokenizer::Add(int32_t token_id) {
  ids_.push_back(token_id);
  const std::string prefix_text = DecodeRange(prefix_offset_, read_offset_);
  const std::string new_text = DecodeRange(prefix_offset_, ids_.size());
  if (new_text.size() <= prefix_text.size() || EndsWithReplacement(new_text)) return {};
  // NOTE: the window's text normally extends the text already emitted; when a decoder
  // rewrites earlier text (an invalid byte-fallback run), emit only what differs, at a
  // character boundary, since emitted text cannot be taken back.
  const size_t common = new_text.compare(0, prefix_text.size(), prefix_text) == 0
                            ? prefix_text.size()
                            : CommonPrefix(prefix_text, new_text);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return new_text.substr(common);
}

std::string IncrementalDetokenizer::BytesOf(int32_t token_id) const {
  if (token_id < 0 || token_id >= tokenizer_.vocab_size()) return {};
  const int32_t alone[1] = {token_id};
  if (tokenizer_.IsSpecial(token_id)) {  // its own text ("</s>"), which the output may skip
    auto bytes = tokenizer_.DecodeBytes(alone, /*skip_special_tokens=*/false);
    return bytes.ok() ? *std::move(bytes) : std::string();
  }
  // The context as the output decodes it (special tokens skipped or not, as there).
  std::vector<int32_t> window;
  window.reserve(ids_.size() - prefix_offset_ + 1);
  for (size_t i = prefix_offset_; i < ids_.size(); ++i) {
    if (ids_[i] >= 0 && ids_[i] < tokenizer_.vocab_size()) window.push_back(ids_[i]);
  }
  const auto before = tokenizer_.DecodeBytes(window, skip_special_);
  window.push_back(token_id);
  const auto after = tokenizer_.DecodeBytes(window, skip_special_);
  if (before.ok() && after.ok() && after->compare(0, before->size(), *before) == 0) {
    return after->substr(before->size());
  }
  // A decoder that rewrote the context (none of the supported ones does on raw bytes): the
  // token alone.
  auto bytes = tokenizer_.DecodeBytes(alone, skip_special_);
  return bytes.ok() ? *std::move(bytes) : std::string();
}

std::string IncrementalDetokenizer::Flush() {
  if (read_offset_ == ids_.size()) return {};
  const std::string prefix_text = DecodeRange(prefix_offset_, read_offset_);
  const std::string new_text = DecodeRange(prefix_offset_, ids_.size());
  read_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size()) return {};
  const size_t common = new_text.compare(0, prefix_text.size(), prefix_text) == 0
                            ? prefix_text.size()
                            : CommonPrefix(prefix_text, new_text);
  return new_text.substr(common);
}

}  // namespace llm::frontend
