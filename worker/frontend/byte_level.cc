#include "worker/frontend/byte_level.h"

#include <array>

#include "common/utf8.h"

namespace llm::frontend {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::string, 256> byte_to_utf8{};
  std::array<int16_t, 256 + 68> char_to_byte{};  // -1 where no byte maps
  Tables() {
    char_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      byte_to_char[b] = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      AppendUtf8(byte_to_char[b], byte_to_utf8[b]);
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToChar(uint8_t byte) { return GetTables().byte_to_char[byte]; }

void AppendByteLevel(std::string_view bytes, std::string& out) {
  const Tables& t = GetTables();
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
}

std::optional<uint8_t> CharToByte(char32_t c) {
  const Tables& t = GetTables();
  if (c >= t.char_to_byte.size() || t.char_to_byte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.char_to_byte[c]);
}

}  // namespace llm::frontend
