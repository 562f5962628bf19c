// The GPT-2 byte-to-character table of byte-level BPE: every byte maps to one printable
// Unicode character, so any byte string becomes a string of vocabulary characters.
#ifndef LLM_WORKER_FRONTEND_BYTE_LEVEL_H_
#define LLM_WORKER_FRONTEND_BYTE_LEVEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llm::frontend {

// The character for `byte` (U+0021..U+00FF for printable bytes, U+0100.. for the others).
char32_t ByteToChar(uint8_t byte);

// Maps every byte of `bytes` to its character, in UTF-8, appended to `out`.
void AppendByteLevel(std::string_view bytes, std::string& out);

// The byte a character stands for, or nullopt when it is not in the table.
std::optional<uint8_t> CharToByte(char32_t c);

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_BYTE_LEVEL_H_
