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

std::vector<int32_t> IncrementalDetokenizer::Window(size_t begin, size_t end) const {
  std::vector<int32_t> window;
  window.reserve(end - begin + 1);
  for (size_t i = begin; i < end; ++i) {
    if (ids_[i] >= 0 && ids_[i] < tokenizer_.vocab_size()) window.push_back(ids_[i]);
  }
  return window;
}

std::string IncrementalDetokenizer::DecodeRange(size_t begin, size_t end) const {
  auto text = tokenizer_.Decode(Window(begin, end), skip_special_);
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

std::vector<std::string> IncrementalDetokenizer::BytesOf(std::span<const int32_t> token_ids) const {
  std::vector<std::string> out;
  out.reserve(token_ids.size());
  // The context as the output decodes it (special tokens skipped or not, as there), decoded
  // once for all the candidates.
  std::vector<int32_t> window = Window(prefix_offset_, ids_.size());
  const auto before = tokenizer_.DecodeBytes(window, skip_special_);
  for (const int32_t id : token_ids) {
    std::string bytes;
    const int32_t alone[1] = {id};
    if (id < 0 || id >= tokenizer_.vocab_size()) {
      // nothing
    } else if (tokenizer_.IsSpecial(id)) {  // its own text ("</s>"), which the output may skip
      auto b = tokenizer_.DecodeBytes(alone, /*skip_special_tokens=*/false);
      if (b.ok()) bytes = *std::move(b);
    } else {
      window.push_back(id);
      const auto after = tokenizer_.DecodeBytes(window, skip_special_);
      window.pop_back();
      if (before.ok() && after.ok() && after->compare(0, before->size(), *before) == 0) {
        bytes = after->substr(before->size());
      } else if (auto b = tokenizer_.DecodeBytes(alone, skip_special_); b.ok()) {
        bytes = *std::move(b);  // a decoder that rewrote the context (none on raw bytes)
      }
    }
    out.push_back(std::move(bytes));
  }
  return out;
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
