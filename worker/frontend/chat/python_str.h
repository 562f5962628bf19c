// Python 3.11 str semantics by code point, for the chat templates' Jinja engine: the
// classes, case mappings, splitting and number parsing that jinja2 templates reach through str
// methods and filters (and the text rules of jinja2's own `title` and `wordcount`). Strings are
// UTF-8; a malformed byte b is carried as the lone surrogate U+DC00+b (Python's
// "surrogateescape"): it belongs to no class, keeps its case and encodes back to b. Classes and
// case mappings come from utf8proc (Unicode 15; Python 3.11 has 14).
#ifndef LLM_WORKER_FRONTEND_CHAT_PYTHON_STR_H_
#define LLM_WORKER_FRONTEND_CHAT_PYTHON_STR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::frontend::jinja {

// A string's parts, as str.split and str.splitlines return them.
using Parts = std::vector<std::u32string>;

// UTF-8 to code points (a malformed byte b becomes U+DC00+b), and back.
std::u32string Decode(std::string_view s);
std::string Encode(std::u32string_view s);

// str.isspace: Python's whitespace (category Zs and the bidirectional classes WS, B and S).
bool IsSpace(char32_t c);

// str.isprintable: false for control, format, surrogate, private-use and unassigned characters
// and for separators other than the ASCII space (repr escapes them).
bool IsPrintable(char32_t c);

// str.isalpha: the letter categories.
bool IsAlpha(char32_t c);

// str.isdecimal: Nd.
bool IsDecimal(char32_t c);

// str.isdigit: Nd and the other characters with a digit value.
bool IsDigit(char32_t c);

// str.isalnum: letters and numbers (Nd, Nl, No).
bool IsAlnum(char32_t c);

// A regex \w in Python (Unicode patterns): str.isalnum or '_'.
bool IsWordChar(char32_t c);

// str.lower / str.upper (full mappings: ß upper is SS; Σ ending a word lowers to ς).
std::string Lower(const std::string& s);
std::string Upper(const std::string& s);

// str.capitalize: the first character titlecased, the rest lowercased.
std::string Capitalize(const std::string& s);

// str.title: a character after a cased one is lowercased, any other titlecased ("they're" →
// "They'Re").
std::string Title(const std::string& s);

// jinja2's `title` filter, unlike str.title: words are what lies between runs of whitespace,
// '-', '(', '{', '[' and '<' ("they're" → "They're"); each gets its first character uppercased
// and the rest lowercased on its own.
std::string TitleFilter(const std::string& s);

// jinja2's `wordcount`: the matches of the regex \w+.
int64_t WordCount(const std::string& s);

// str.isupper / str.islower: no character of the other case or titlecase, and at least one of
// the case asked for.
bool HasOnlyCase(const std::string& s, bool upper);

// str.isalpha, isdigit...: every character in the class, and at least one character.
bool AllIn(const std::string& s, bool (*in_class)(char32_t));

// str.strip / lstrip / rstrip(chars): `chars` none strips whitespace.
std::string Strip(const std::string& s, const std::optional<std::u32string>& chars, bool left,
                  bool right);

// str.split(None, maxsplit): runs of whitespace separate; after `maxsplit` splits (negative: no
// limit) the rest is one part, from its first non-space on.
Parts SplitWhitespace(std::u32string_view s, int64_t maxsplit);

// str.rsplit(None, maxsplit): as SplitWhitespace from the right; the rest keeps its leading
// whitespace (" a b ".rsplit(None, 1) == [" a", "b"]).
Parts RSplitWhitespace(std::u32string_view s, int64_t maxsplit);

// str.split(sep, maxsplit) / str.rsplit(sep, maxsplit) with a non-empty separator.
Parts SplitOn(std::u32string_view s, std::u32string_view sep, int64_t maxsplit);
Parts RSplitOn(std::u32string_view s, std::u32string_view sep, int64_t maxsplit);

// str.splitlines(keepends): lines end at any of IsLineBreak (\r\n as one); a last line without
// an end counts, an empty one does not.
Parts SplitLines(std::u32string_view s, bool keepends);

// str.replace(old, with, count) (count negative: all; an empty `old` inserts `with` between
// every character and at both ends).
std::string Replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count);

// The text int() and float() parse: surrounding whitespace dropped (Python's, except the ASCII
// separators \x1c..\x1f) and Unicode decimal digits (Nd: "١٢") read as ASCII ones; none when
// anything else outside ASCII remains.
std::optional<std::string> NumericText(const std::string& s);

// Python's int(text, base) on NumericText: a sign, then in base 16, 8 or 2 an optional 0x, 0o or
// 0b (base 0 takes the base from that prefix, else decimal without leading zeros), then digits
// with single '_' between them (and after a prefix). INVALID_ARGUMENT where Python raises
// ValueError (a base outside 2..36 too); OUT_OF_RANGE beyond 64 bits.
absl::StatusOr<int64_t> ParseInt(std::string_view t, int64_t base);

// Python's float(text) on NumericText: a sign, then inf, infinity or nan (any case), or digits
// with an optional fraction and exponent ('_' only between digits); none where it raises.
std::optional<double> ParseFloat(std::string_view t);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_PYTHON_STR_H_
