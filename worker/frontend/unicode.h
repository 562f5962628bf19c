// Unicode character classes the tokenizer needs (White_Space, word characters).
#ifndef LLM_WORKER_FRONTEND_UNICODE_H_
#define LLM_WORKER_FRONTEND_UNICODE_H_

#include <cstddef>
#include <string_view>

namespace llm::frontend {

// Unicode White_Space, as Rust's char::is_whitespace.
bool IsWhitespace(char32_t c);
// Letters, numbers and '_' (a regex \w in Unicode mode).
bool IsWordChar(char32_t c);

// Byte offset just past the run of whitespace at the start of `s`.
size_t WhitespacePrefixEnd(std::string_view s);
// Byte offset where the run of whitespace at the end of `s` begins.
size_t WhitespaceSuffixStart(std::string_view s);

// The first / last code point of valid UTF-8 `s`; 0 when empty.
char32_t FirstChar(std::string_view s);
char32_t LastChar(std::string_view s);

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_UNICODE_H_
