// UTF-8 helpers shared by the tokenizer, the detokenizer and request validation.
#ifndef LLM_COMMON_UTF8_H_
#define LLM_COMMON_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace llm {

// Length in bytes of the UTF-8 sequence that starts with `lead` (1..4), or 0 when `lead` cannot
// start a sequence (a continuation byte or 0xF8..0xFF).
int Utf8SequenceLength(uint8_t lead);

// Appends the UTF-8 encoding of `code_point` (must be <= 0x10FFFF) to `out`.
void AppendUtf8(char32_t code_point, std::string& out);

// Decodes the code point at `text[pos]` of well-formed UTF-8 and advances `pos`. Only for text
// that is known to be valid (checked with IsValidUtf8).
char32_t DecodeUtf8(std::string_view text, size_t& pos);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Byte offset of the first ill-formed sequence, or text.size() when all of `text` is valid.
size_t FirstInvalidUtf8(std::string_view text);

// Converts bytes to valid UTF-8, replacing each maximal ill-formed subpart with U+FFFD (the
// substitution policy of Unicode 3.9 / Rust's String::from_utf8_lossy, which the Hugging Face
// decoders use).
std::string Utf8Lossy(std::string_view bytes);

// The U+FFFD replacement character in UTF-8.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace llm

#endif  // LLM_COMMON_UTF8_H_
