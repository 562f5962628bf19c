// Regular expressions over bytes for constrained decoding: parsed into a Thompson NFA whose
// transitions are byte ranges, so a token's bytes can be walked one at a time (a token may end
// in the middle of a UTF-8 character). Pure logic.
//
// Syntax (a subset of what JSON Schema `pattern`, vLLM's `regex` and Outlines accept):
//   literals (UTF-8; a multi-byte character is its byte sequence), `.` (any character but
//   newline), classes `[a-z_]`, `[^"\\]` (ASCII members; a negated class also matches every
//   non-ASCII character), escapes `\d \w \s \D \W \S \n \r \t \f \v \0 \xHH \uHHHH` and escaped
//   punctuation, groups `(...)` and `(?:...)`, alternation `|`, quantifiers `* + ? {n} {n,}
//   {n,m}` (greedy; a lazy `?` suffix is accepted and means the same here), `^`/`$` at the
//   ends of the pattern (the whole output must match). Two extensions, for patterns the worker
//   builds only: the length group `(?{m,n}...)` (also `{m}`, `{m,}`), what its body matches
//   that is m..n UTF-8 characters long (a JSON schema's string lengths beside a pattern or a
//   format; its automaton is the body's once per count, so n x the body's states); and the
//   JSON text group `(?~...)`, what its body matches that holds no byte a JSON string must
//   escape (control bytes, '"', '\\': a schema pattern's `\s` or `.` inside a string). Not
//   supported: backreferences, lookaround, Unicode classes (`\p{..}`), non-ASCII class members;
//   each is an error naming the offset.
#ifndef LLM_WORKER_CONSTRAINT_BYTE_REGEX_H_
#define LLM_WORKER_CONSTRAINT_BYTE_REGEX_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::constraint {

struct NfaState {
  struct Edge {
    uint8_t lo, hi;  // byte range, inclusive
    int32_t to;
  };
  std::vector<Edge> edges;
  std::vector<int32_t> eps;  // moves without a byte
};

struct ByteNfa {
  std::vector<NfaState> states;
  int32_t start = 0;
  int32_t accept = 0;  // the one accepting state
};

// States beyond this make the pattern an error (counted repetitions multiply a pattern).
inline constexpr size_t kMaxNfaStates = 200000;

// INVALID_ARGUMENT "<field>: ... at offset N" for what the syntax above does not cover.
// `extensions`: the length group and the JSON text group (below), which only patterns the
// worker builds may use (a client's regex or schema pattern is what other engines accept).
absl::StatusOr<ByteNfa> ParseRegex(std::string_view pattern, std::string_view field = "regex",
                                   bool extensions = false);

// A regex matching `text` literally (every metacharacter escaped).
std::string EscapeRegex(std::string_view text);

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_BYTE_REGEX_H_
