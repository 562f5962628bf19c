#include "worker/frontend/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace llm::frontend {
namespace {

// Match data is per thread: pcre2_match_data is not shareable across concurrent matches.
struct MatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(data); }
};

pcre2_match_data* ThreadMatchData() {
  thread_local MatchData md;
  return md.data;
}

// `pattern` with \s and \S spelled as the Unicode White_Space property, which is what the
// tokenizers' regex engine means by them. PCRE2's \s also takes U+180E (a format character
// since Unicode 6.3), so "x\u180e<s" split differently from Hugging Face.
std::string WhiteSpaceAsUnicode(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size());
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];  // an escape: \s, \S, or any other (\\ included) as it is
    if (next == 'Q') {               // \Q...\E quotes: copied as they are
      const size_t end = pattern.find("\\E", i + 1);
      const size_t stop = end == std::string::npos ? pattern.size() : end + 2;
      out.append(pattern, i - 1, stop - (i - 1));
      i = stop - 1;
    } else if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else {
      out += '\\';
      out += next;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = WhiteSpaceAsUnicode(pattern);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regex '", pattern, "' at offset ", offset, ": ",
                                                   reinterpret_cast<char*>(message)));
  }
  // JIT is an optimisation; the interpreter gives the same matches when it is unavailable.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = pattern;
  re->code_ = code;
  return re;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  matches.clear();
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = ThreadMatchData();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or a resource limit: no further matches
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e == b) {
      // Empty match: step over one character so the scan always advances.
      if (b >= text.size()) break;
      const int len = Utf8SequenceLength(static_cast<uint8_t>(text[b]));
      start = b + (len > 0 ? len : 1);
      continue;
    }
    matches.emplace_back(b, e);
    start = e;
  }
}

}  // namespace llm::frontend
