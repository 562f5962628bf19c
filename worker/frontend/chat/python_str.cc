#include "worker/frontend/chat/python_str.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "worker/frontend/chat/jinja_value.h"

namespace llm::frontend::jinja {

// ---- Python's str, by code point ----
//
// Python's str methods count, slice and classify code points. They work on the text decoded to
// UTF-32; a malformed byte b decodes to the lone surrogate U+DC00+b (Python's "surrogateescape"),
// which belongs to no class, keeps its case and encodes back to b. Classes and case mappings come
// from utf8proc's Unicode data, with the few properties it does not carry listed below (generated
// from Python 3.11's str methods).

std::u32string Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n =
        utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                         static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n <= 0) {
      out.push_back(0xDC00 + static_cast<unsigned char>(s[i]));
      ++i;
    } else {
      out.push_back(static_cast<char32_t>(c));
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

std::string Encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char32_t c : s) {
    if (c >= 0xDC80 && c <= 0xDCFF) {
      out += static_cast<char>(c - 0xDC00);
      continue;
    }
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

namespace {

struct Range {
  char32_t first, last;
};

template <size_t N>
bool InRanges(char32_t c, const Range (&ranges)[N]) {
  return std::any_of(std::begin(ranges), std::end(ranges),
                     [c](const Range& r) { return c >= r.first && c <= r.last; });
}

// Digits outside Nd (superscripts, circled and parenthesized digits...): str.isdigit.
constexpr Range kOtherDigits[] = {
    {0xB2, 0xB3},       {0xB9, 0xB9},       {0x1369, 0x1371},   {0x19DA, 0x19DA},
    {0x2070, 0x2070},   {0x2074, 0x2079},   {0x2080, 0x2089},   {0x2460, 0x2468},
    {0x2474, 0x247C},   {0x2488, 0x2490},   {0x24EA, 0x24EA},   {0x24F5, 0x24FD},
    {0x24FF, 0x24FF},   {0x2776, 0x277E},   {0x2780, 0x2788},   {0x278A, 0x2792},
    {0x10A40, 0x10A43}, {0x10E60, 0x10E68}, {0x11052, 0x1105A}, {0x1F100, 0x1F10A}};
// Unicode's Other_Lowercase (ª, modifier letters, small Roman numerals, ⓐ...).
constexpr Range kOtherLowercase[] = {
    {0xAA, 0xAA},       {0xBA, 0xBA},       {0x2B0, 0x2B8},     {0x2C0, 0x2C1},    {0x2E0, 0x2E4},
    {0x345, 0x345},     {0x37A, 0x37A},     {0x1D2C, 0x1D6A},   {0x1D78, 0x1D78},  {0x1D9B, 0x1DBF},
    {0x2071, 0x2071},   {0x207F, 0x207F},   {0x2090, 0x209C},   {0x2170, 0x217F},  {0x24D0, 0x24E9},
    {0x2C7C, 0x2C7D},   {0xA69C, 0xA69D},   {0xA770, 0xA770},   {0xA7F8, 0xA7F9},  {0xAB5C, 0xAB5F},
    {0x10780, 0x10780}, {0x10783, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA}};
// Unicode's Other_Uppercase (Roman numerals, Ⓐ, squared and circled Latin capitals).
constexpr Range kOtherUppercase[] = {
    {0x2160, 0x216F}, {0x24B6, 0x24CF}, {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189}};
// Case_Ignorable characters outside the categories Mn, Me, Cf, Lm, Sk: apostrophes, periods and
// colons that may sit inside a word.
constexpr Range kWordInnerPunctuation[] = {
    {0x27, 0x27},     {0x2E, 0x2E},     {0x3A, 0x3A},     {0xB7, 0xB7},
    {0x387, 0x387},   {0x55F, 0x55F},   {0x5F4, 0x5F4},   {0x2018, 0x2019},
    {0x2024, 0x2024}, {0x2027, 0x2027}, {0xFE13, 0xFE13}, {0xFE52, 0xFE52},
    {0xFE55, 0xFE55}, {0xFF07, 0xFF07}, {0xFF0E, 0xFF0E}, {0xFF1A, 0xFF1A}};

utf8proc_category_t Category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}
}  // namespace

// str.isspace: Python's whitespace (category Zs and the bidirectional classes WS, B and S).
bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

namespace {
// str.splitlines' line boundaries (\r\n counts as one).
bool IsLineBreak(char32_t c) {
  return (c >= 0x0A && c <= 0x0D) || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 ||
         c == 0x2029;
}
}  // namespace
// str.isprintable.
bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (Category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

// str.isalpha: the letter categories.
bool IsAlpha(char32_t c) {
  const utf8proc_category_t k = Category(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
// str.isdecimal: Nd.
bool IsDecimal(char32_t c) { return Category(c) == UTF8PROC_CATEGORY_ND; }
// str.isdigit: Nd and the other characters with a digit value.
bool IsDigit(char32_t c) { return IsDecimal(c) || InRanges(c, kOtherDigits); }
// str.isalnum: letters and numbers (Nd, Nl, No).
bool IsAlnum(char32_t c) {
  const utf8proc_category_t k = Category(c);
  return IsAlpha(c) || (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

bool IsWordChar(char32_t c) { return c == '_' || IsAlnum(c); }

namespace {
// Python's Lowercase, Uppercase and Titlecase classes (str.islower, isupper, istitle).
bool IsLowercase(char32_t c) {
  return Category(c) == UTF8PROC_CATEGORY_LL || InRanges(c, kOtherLowercase);
}
bool IsUppercase(char32_t c) {
  return Category(c) == UTF8PROC_CATEGORY_LU || InRanges(c, kOtherUppercase);
}
bool IsTitlecase(char32_t c) { return Category(c) == UTF8PROC_CATEGORY_LT; }
bool IsCased(char32_t c) { return IsLowercase(c) || IsUppercase(c) || IsTitlecase(c); }
// Characters that case mapping looks through when it asks whether a Σ ends a word.
bool IsCaseIgnorable(char32_t c) {
  switch (Category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return InRanges(c, kWordInnerPunctuation);
  }
}

// The characters whose Python upper() (and sometimes title()) is several characters (Unicode's
// SpecialCasing: ß → SS, ﬁ → FI, ᾳ → ΑΙ, ...). An empty title means the one-character one.
struct SpecialCase {
  char32_t c;
  char32_t upper[3];
  char32_t title[3];
};
constexpr SpecialCase kSpecialCases[] = {{0xDF, {0x53, 0x53}, {0x53, 0x73}},
                                         {0x149, {0x2BC, 0x4E}, {0x2BC, 0x4E}},
                                         {0x1F0, {0x4A, 0x30C}, {0x4A, 0x30C}},
                                         {0x390, {0x399, 0x308, 0x301}, {0x399, 0x308, 0x301}},
                                         {0x3B0, {0x3A5, 0x308, 0x301}, {0x3A5, 0x308, 0x301}},
                                         {0x587, {0x535, 0x552}, {0x535, 0x582}},
                                         {0x1E96, {0x48, 0x331}, {0x48, 0x331}},
                                         {0x1E97, {0x54, 0x308}, {0x54, 0x308}},
                                         {0x1E98, {0x57, 0x30A}, {0x57, 0x30A}},
                                         {0x1E99, {0x59, 0x30A}, {0x59, 0x30A}},
                                         {0x1E9A, {0x41, 0x2BE}, {0x41, 0x2BE}},
                                         {0x1F50, {0x3A5, 0x313}, {0x3A5, 0x313}},
                                         {0x1F52, {0x3A5, 0x313, 0x300}, {0x3A5, 0x313, 0x300}},
                                         {0x1F54, {0x3A5, 0x313, 0x301}, {0x3A5, 0x313, 0x301}},
                                         {0x1F56, {0x3A5, 0x313, 0x342}, {0x3A5, 0x313, 0x342}},
                                         {0x1F80, {0x1F08, 0x399}, {}},
                                         {0x1F81, {0x1F09, 0x399}, {}},
                                         {0x1F82, {0x1F0A, 0x399}, {}},
                                         {0x1F83, {0x1F0B, 0x399}, {}},
                                         {0x1F84, {0x1F0C, 0x399}, {}},
                                         {0x1F85, {0x1F0D, 0x399}, {}},
                                         {0x1F86, {0x1F0E, 0x399}, {}},
                                         {0x1F87, {0x1F0F, 0x399}, {}},
                                         {0x1F88, {0x1F08, 0x399}, {}},
                                         {0x1F89, {0x1F09, 0x399}, {}},
                                         {0x1F8A, {0x1F0A, 0x399}, {}},
                                         {0x1F8B, {0x1F0B, 0x399}, {}},
                                         {0x1F8C, {0x1F0C, 0x399}, {}},
                                         {0x1F8D, {0x1F0D, 0x399}, {}},
                                         {0x1F8E, {0x1F0E, 0x399}, {}},
                                         {0x1F8F, {0x1F0F, 0x399}, {}},
                                         {0x1F90, {0x1F28, 0x399}, {}},
                                         {0x1F91, {0x1F29, 0x399}, {}},
                                         {0x1F92, {0x1F2A, 0x399}, {}},
                                         {0x1F93, {0x1F2B, 0x399}, {}},
                                         {0x1F94, {0x1F2C, 0x399}, {}},
                                         {0x1F95, {0x1F2D, 0x399}, {}},
                                         {0x1F96, {0x1F2E, 0x399}, {}},
                                         {0x1F97, {0x1F2F, 0x399}, {}},
                                         {0x1F98, {0x1F28, 0x399}, {}},
                                         {0x1F99, {0x1F29, 0x399}, {}},
                                         {0x1F9A, {0x1F2A, 0x399}, {}},
                                         {0x1F9B, {0x1F2B, 0x399}, {}},
                                         {0x1F9C, {0x1F2C, 0x399}, {}},
                                         {0x1F9D, {0x1F2D, 0x399}, {}},
                                         {0x1F9E, {0x1F2E, 0x399}, {}},
                                         {0x1F9F, {0x1F2F, 0x399}, {}},
                                         {0x1FA0, {0x1F68, 0x399}, {}},
                                         {0x1FA1, {0x1F69, 0x399}, {}},
                                         {0x1FA2, {0x1F6A, 0x399}, {}},
                                         {0x1FA3, {0x1F6B, 0x399}, {}},
                                         {0x1FA4, {0x1F6C, 0x399}, {}},
                                         {0x1FA5, {0x1F6D, 0x399}, {}},
                                         {0x1FA6, {0x1F6E, 0x399}, {}},
                                         {0x1FA7, {0x1F6F, 0x399}, {}},
                                         {0x1FA8, {0x1F68, 0x399}, {}},
                                         {0x1FA9, {0x1F69, 0x399}, {}},
                                         {0x1FAA, {0x1F6A, 0x399}, {}},
                                         {0x1FAB, {0x1F6B, 0x399}, {}},
                                         {0x1FAC, {0x1F6C, 0x399}, {}},
                                         {0x1FAD, {0x1F6D, 0x399}, {}},
                                         {0x1FAE, {0x1F6E, 0x399}, {}},
                                         {0x1FAF, {0x1F6F, 0x399}, {}},
                                         {0x1FB2, {0x1FBA, 0x399}, {0x1FBA, 0x345}},
                                         {0x1FB3, {0x391, 0x399}, {}},
                                         {0x1FB4, {0x386, 0x399}, {0x386, 0x345}},
                                         {0x1FB6, {0x391, 0x342}, {0x391, 0x342}},
                                         {0x1FB7, {0x391, 0x342, 0x399}, {0x391, 0x342, 0x345}},
                                         {0x1FBC, {0x391, 0x399}, {}},
                                         {0x1FC2, {0x1FCA, 0x399}, {0x1FCA, 0x345}},
                                         {0x1FC3, {0x397, 0x399}, {}},
                                         {0x1FC4, {0x389, 0x399}, {0x389, 0x345}},
                                         {0x1FC6, {0x397, 0x342}, {0x397, 0x342}},
                                         {0x1FC7, {0x397, 0x342, 0x399}, {0x397, 0x342, 0x345}},
                                         {0x1FCC, {0x397, 0x399}, {}},
                                         {0x1FD2, {0x399, 0x308, 0x300}, {0x399, 0x308, 0x300}},
                                         {0x1FD3, {0x399, 0x308, 0x301}, {0x399, 0x308, 0x301}},
                                         {0x1FD6, {0x399, 0x342}, {0x399, 0x342}},
                                         {0x1FD7, {0x399, 0x308, 0x342}, {0x399, 0x308, 0x342}},
                                         {0x1FE2, {0x3A5, 0x308, 0x300}, {0x3A5, 0x308, 0x300}},
                                         {0x1FE3, {0x3A5, 0x308, 0x301}, {0x3A5, 0x308, 0x301}},
                                         {0x1FE4, {0x3A1, 0x313}, {0x3A1, 0x313}},
                                         {0x1FE6, {0x3A5, 0x342}, {0x3A5, 0x342}},
                                         {0x1FE7, {0x3A5, 0x308, 0x342}, {0x3A5, 0x308, 0x342}},
                                         {0x1FF2, {0x1FFA, 0x399}, {0x1FFA, 0x345}},
                                         {0x1FF3, {0x3A9, 0x399}, {}},
                                         {0x1FF4, {0x38F, 0x399}, {0x38F, 0x345}},
                                         {0x1FF6, {0x3A9, 0x342}, {0x3A9, 0x342}},
                                         {0x1FF7, {0x3A9, 0x342, 0x399}, {0x3A9, 0x342, 0x345}},
                                         {0x1FFC, {0x3A9, 0x399}, {}},
                                         {0xFB00, {0x46, 0x46}, {0x46, 0x66}},
                                         {0xFB01, {0x46, 0x49}, {0x46, 0x69}},
                                         {0xFB02, {0x46, 0x4C}, {0x46, 0x6C}},
                                         {0xFB03, {0x46, 0x46, 0x49}, {0x46, 0x66, 0x69}},
                                         {0xFB04, {0x46, 0x46, 0x4C}, {0x46, 0x66, 0x6C}},
                                         {0xFB05, {0x53, 0x54}, {0x53, 0x74}},
                                         {0xFB06, {0x53, 0x54}, {0x53, 0x74}},
                                         {0xFB13, {0x544, 0x546}, {0x544, 0x576}},
                                         {0xFB14, {0x544, 0x535}, {0x544, 0x565}},
                                         {0xFB15, {0x544, 0x53B}, {0x544, 0x56B}},
                                         {0xFB16, {0x54E, 0x546}, {0x54E, 0x576}},
                                         {0xFB17, {0x544, 0x53D}, {0x544, 0x56D}}};

const SpecialCase* FindSpecialCase(char32_t c) {
  const auto* it = std::lower_bound(std::begin(kSpecialCases), std::end(kSpecialCases), c,
                                    [](const SpecialCase& s, char32_t x) { return s.c < x; });
  return it != std::end(kSpecialCases) && it->c == c ? it : nullptr;
}

void AppendMapping(const char32_t (&mapping)[3], std::u32string* out) {
  for (const char32_t c : mapping) {
    if (c != 0) out->push_back(c);
  }
}

// Python's full uppercase and titlecase of one character.
void AppendUpper(char32_t c, std::u32string* out) {
  if (const SpecialCase* s = FindSpecialCase(c)) return AppendMapping(s->upper, out);
  out->push_back(static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
}
void AppendTitle(char32_t c, std::u32string* out) {
  if (const SpecialCase* s = FindSpecialCase(c); s != nullptr && s->title[0] != 0) {
    return AppendMapping(s->title, out);
  }
  out->push_back(static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))));
}

// Unicode's Final_Sigma: text[i] follows a cased letter and no cased letter follows it (looking
// through case-ignorable characters both ways).
bool IsFinalSigma(std::u32string_view text, size_t i) {
  size_t before = i;
  while (before > 0 && IsCaseIgnorable(text[before - 1])) --before;
  if (before == 0 || !IsCased(text[before - 1])) return false;
  size_t after = i + 1;
  while (after < text.size() && IsCaseIgnorable(text[after])) ++after;
  return after == text.size() || !IsCased(text[after]);
}

// Python's full lowercase of text[i]: İ becomes i and a combining dot; Σ ending a word becomes ς.
void AppendLower(std::u32string_view text, size_t i, std::u32string* out) {
  const char32_t c = text[i];
  if (c == 0x130) {
    out->append({U'i', 0x307});
  } else if (c == 0x3A3 && IsFinalSigma(text, i)) {
    out->push_back(0x3C2);
  } else {
    out->push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
}

std::u32string LowerText(std::u32string_view text) {
  std::u32string out;
  for (size_t i = 0; i < text.size(); ++i) AppendLower(text, i, &out);
  return out;
}
}  // namespace

// str.lower / str.upper.
std::string Lower(const std::string& s) { return Encode(LowerText(Decode(s))); }
std::string Upper(const std::string& s) {
  std::u32string out;
  for (const char32_t c : Decode(s)) AppendUpper(c, &out);
  return Encode(out);
}

// str.capitalize: the first character titlecased, the rest lowercased.
std::string Capitalize(const std::string& s) {
  const std::u32string text = Decode(s);
  std::u32string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == 0) {
      AppendTitle(text[0], &out);
    } else {
      AppendLower(text, i, &out);
    }
  }
  return Encode(out);
}

// str.title: a character after a cased one is lowercased, any other titlecased ("they're" →
// "They'Re").
std::string Title(const std::string& s) {
  const std::u32string text = Decode(s);
  std::u32string out;
  bool after_cased = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (after_cased) {
      AppendLower(text, i, &out);
    } else {
      AppendTitle(text[i], &out);
    }
    after_cased = IsCased(text[i]);
  }
  return Encode(out);
}

// jinja2's `title` filter, unlike str.title: words are what lies between runs of whitespace,
// '-', '(', '{', '[' and '<' ("they're" → "They're"); each gets its first character uppercased
// and the rest lowercased on its own.
std::string TitleFilter(const std::string& s) {
  const auto is_break = [](char32_t c) {
    return IsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  const std::u32string text = Decode(s);
  std::u32string out;
  for (size_t i = 0; i < text.size();) {
    size_t end = i;
    while (end < text.size() && is_break(text[end]) == is_break(text[i])) ++end;
    if (is_break(text[i])) {
      out.append(text, i, end - i);
    } else {
      AppendUpper(text[i], &out);
      out += LowerText(std::u32string_view(text).substr(i + 1, end - i - 1));
    }
    i = end;
  }
  return Encode(out);
}

// jinja2's `wordcount`: the matches of the regex \w+.
int64_t WordCount(const std::string& s) {
  int64_t n = 0;
  bool in_word = false;
  for (const char32_t c : Decode(s)) {
    const bool word = IsWordChar(c);
    if (word && !in_word) ++n;
    in_word = word;
  }
  return n;
}

// str.isupper / str.islower: no character of the other case or titlecase, and at least one of
// the case asked for.
bool HasOnlyCase(const std::string& s, bool upper) {
  bool any = false;
  for (const char32_t c : Decode(s)) {
    if (IsTitlecase(c) || (upper ? IsLowercase(c) : IsUppercase(c))) return false;
    any = any || (upper ? IsUppercase(c) : IsLowercase(c));
  }
  return any;
}

// str.isalpha, isdigit...: every character in the class, and at least one character.
bool AllIn(const std::string& s, bool (*in_class)(char32_t)) {
  const std::u32string text = Decode(s);
  return !text.empty() && std::all_of(text.begin(), text.end(), in_class);
}

// str.strip / lstrip / rstrip(chars): `chars` none strips whitespace.
std::string Strip(const std::string& s, const std::optional<std::u32string>& chars, bool left,
                  bool right) {
  const auto strip = [&chars](char32_t c) {
    return chars ? chars->find(c) != std::u32string::npos : IsSpace(c);
  };
  const std::u32string text = Decode(s);
  size_t b = 0, e = text.size();
  while (left && b < e && strip(text[b])) ++b;
  while (right && e > b && strip(text[e - 1])) --e;
  return Encode(std::u32string_view(text).substr(b, e - b));
}

// str.split(None, maxsplit): runs of whitespace separate; after `maxsplit` splits (negative: no
// limit) the rest is one part, from its first non-space on.
Parts SplitWhitespace(std::u32string_view s, int64_t maxsplit) {
  Parts out;
  size_t i = 0;
  for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
    while (i < s.size() && IsSpace(s[i])) ++i;
    if (i == s.size()) return out;
    const size_t start = i;
    while (i < s.size() && !IsSpace(s[i])) ++i;
    out.emplace_back(s.substr(start, i - start));
  }
  while (i < s.size() && IsSpace(s[i])) ++i;
  if (i < s.size()) out.emplace_back(s.substr(i));
  return out;
}

// str.rsplit(None, maxsplit): as SplitWhitespace from the right; the rest keeps its leading
// whitespace (" a b ".rsplit(None, 1) == [" a", "b"]).
Parts RSplitWhitespace(std::u32string_view s, int64_t maxsplit) {
  Parts out;
  size_t i = s.size();  // the parts found so far start at or after i
  for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
    while (i > 0 && IsSpace(s[i - 1])) --i;
    if (i == 0) break;
    const size_t end = i;
    while (i > 0 && !IsSpace(s[i - 1])) --i;
    out.emplace_back(s.substr(i, end - i));
  }
  while (i > 0 && IsSpace(s[i - 1])) --i;
  if (i > 0) out.emplace_back(s.substr(0, i));
  std::reverse(out.begin(), out.end());
  return out;
}

// str.split(sep, maxsplit) / str.rsplit(sep, maxsplit) with a non-empty separator.
Parts SplitOn(std::u32string_view s, std::u32string_view sep, int64_t maxsplit) {
  Parts out;
  size_t start = 0;
  for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
    const size_t at = s.find(sep, start);
    if (at == std::u32string_view::npos) break;
    out.emplace_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  out.emplace_back(s.substr(start));
  return out;
}
Parts RSplitOn(std::u32string_view s, std::u32string_view sep, int64_t maxsplit) {
  Parts out;
  size_t end = s.size();
  for (int64_t n = 0; (maxsplit < 0 || n < maxsplit) && end >= sep.size(); ++n) {
    const size_t at = s.substr(0, end).rfind(sep);
    if (at == std::u32string_view::npos) break;
    out.emplace_back(s.substr(at + sep.size(), end - at - sep.size()));
    end = at;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

// str.splitlines(keepends): lines end at any of IsLineBreak (\r\n as one); a last line without
// an end counts, an empty one does not.
Parts SplitLines(std::u32string_view s, bool keepends) {
  Parts out;
  for (size_t i = 0; i < s.size();) {
    size_t end = i;
    while (end < s.size() && !IsLineBreak(s[end])) ++end;
    size_t next = end;
    if (next < s.size())
      next += s[next] == '\r' && next + 1 < s.size() && s[next + 1] == '\n' ? 2 : 1;
    out.emplace_back(s.substr(i, (keepends ? next : end) - i));
    i = next;
  }
  return out;
}

std::string Replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count) {
  if (count == 0) return s;
  if (old.empty()) {
    // Python inserts `with` between every character (and at both ends).
    std::string out = with;
    int64_t n = 1;
    for (const auto& c : CodePoints(s)) {
      out += c;
      if (count < 0 || n < count) {
        out += with;
        ++n;
      }
    }
    return out;
  }
  std::string out;
  size_t start = 0;
  int64_t n = 0;
  for (;;) {
    const size_t at = s.find(old, start);
    if (at == std::string::npos || (count >= 0 && n >= count)) break;
    out += s.substr(start, at - start) + with;
    start = at + old.size();
    ++n;
  }
  return out + s.substr(start);
}

// ---- Numbers from strings, as Python's int() and float() read them ----

// The text int() and float() parse: surrounding whitespace dropped (Python's, except the ASCII
// separators \x1c..\x1f) and Unicode decimal digits (Nd: "١٢") read as ASCII ones; none when
// anything else outside ASCII remains.
std::optional<std::string> NumericText(const std::string& s) {
  const auto space = [](char32_t c) { return IsSpace(c) && !(c >= 0x1C && c <= 0x1F); };
  const std::u32string text = Decode(s);
  size_t b = 0, e = text.size();
  while (b < e && space(text[b])) ++b;
  while (e > b && space(text[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) {
    const char32_t c = text[i];
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (IsDecimal(c)) {
      // Nd comes in runs of ten, 0 to 9, so a digit's value is its place in its run.
      char32_t run_start = c;
      while (IsDecimal(run_start - 1)) --run_start;
      out += static_cast<char>('0' + (c - run_start) % 10);
    } else {
      return std::nullopt;
    }
  }
  return out;
}

namespace {

int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  const char lower = absl::ascii_tolower(static_cast<unsigned char>(c));
  if (lower >= 'a' && lower <= 'z') return lower - 'a' + 10;
  return 99;
}
}  // namespace

// Python's int(text, base) on NumericText: a sign, then in base 16, 8 or 2 an optional 0x, 0o or
// 0b (base 0 takes the base from that prefix, else decimal without leading zeros), then digits
// with single '_' between them (and after a prefix). INVALID_ARGUMENT where Python raises
// ValueError (a base outside 2..36 too); OUT_OF_RANGE beyond 64 bits.
absl::StatusOr<int64_t> ParseInt(std::string_view t, int64_t base) {
  const absl::Status invalid =
      absl::InvalidArgumentError(absl::StrCat("invalid literal for int() with base ", base));
  if (base != 0 && (base < 2 || base > 36)) return invalid;
  size_t i = 0;
  const bool negative = !t.empty() && t[0] == '-';
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) ++i;
  if (t.size() - i >= 2 && t[i] == '0') {
    const char p = absl::ascii_tolower(static_cast<unsigned char>(t[i + 1]));
    const int64_t prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : -1;
    if (base == prefix_base || (base == 0 && prefix_base > 0)) {
      base = prefix_base;
      i += 2;
      if (i < t.size() && t[i] == '_') ++i;
    }
  }
  const bool zeros_only = base == 0 && i < t.size() && t[i] == '0';
  if (base == 0) base = 10;
  const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  uint64_t magnitude = 0;
  bool overflow = false, any_digit = false;
  for (; i < t.size(); ++i) {
    if (t[i] == '_') {
      if (!any_digit || i + 1 == t.size() || t[i + 1] == '_') return invalid;
      continue;
    }
    const int d = DigitValue(t[i]);
    if (d >= base || (zeros_only && d != 0)) return invalid;
    any_digit = true;
    const auto ud = static_cast<uint64_t>(d), ub = static_cast<uint64_t>(base);
    overflow = overflow || magnitude > (limit - ud) / ub;
    if (!overflow) magnitude = magnitude * ub + ud;
  }
  if (!any_digit) return invalid;
  if (overflow) return absl::OutOfRangeError("beyond 64 bits");
  return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
}

namespace {

// Copies the digits at t[i...] to `out`, '_' allowed only between two digits; where they end, or
// npos at a misplaced '_'.
size_t TakeDigits(std::string_view t, size_t i, std::string* out) {
  for (; i < t.size(); ++i) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(t[i]))) {
      *out += t[i];
    } else if (t[i] != '_') {
      break;
    } else if (out->empty() || !absl::ascii_isdigit(static_cast<unsigned char>(out->back())) ||
               i + 1 == t.size() || !absl::ascii_isdigit(static_cast<unsigned char>(t[i + 1]))) {
      return std::string_view::npos;
    }
  }
  return i;
}
}  // namespace

// Python's float(text) on NumericText: a sign, then inf, infinity or nan (any case), or digits
// with an optional fraction and exponent ('_' only between digits); none where it raises.
std::optional<double> ParseFloat(std::string_view t) {
  std::string clean;
  size_t i = 0;
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) clean += t[i++];
  const std::string word = absl::AsciiStrToLower(std::string(t.substr(i)));
  if (word == "inf" || word == "infinity" || word == "nan") {
    const double x = word == "nan" ? NAN : INFINITY;
    return clean == "-" ? -x : x;
  }
  const size_t mantissa_start = clean.size();
  size_t j = TakeDigits(t, i, &clean);
  if (j == std::string_view::npos) return std::nullopt;
  size_t num_digits = j - i;
  if (j < t.size() && t[j] == '.') {
    clean += '.';
    i = j + 1;
    j = TakeDigits(t, i, &clean);
    if (j == std::string_view::npos) return std::nullopt;
    num_digits += j - i;
  }
  if (num_digits == 0 || clean.size() == mantissa_start) return std::nullopt;
  if (j < t.size() && (t[j] == 'e' || t[j] == 'E')) {
    clean += 'e';
    if (++j < t.size() && (t[j] == '-' || t[j] == '+')) clean += t[j++];
    i = j;
    j = TakeDigits(t, i, &clean);
    if (j == std::string_view::npos || j == i) return std::nullopt;
  }
  if (j != t.size()) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

}  // namespace llm::frontend::jinja
