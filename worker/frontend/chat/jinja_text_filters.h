// jinja2's filters that lay out or encode text, each as jinja2 3.1 computes it (in Python 3.11)
// for the templates' environment: no autoescaping, newline_sequence "\n". ApplyFilter
// (jinja_filters.cc) takes their arguments; these functions hold the algorithms.
//
// Lengths and widths count code points, as Python's len(). Errors are INVALID_ARGUMENT naming the
// filter and what Python complains of; output past kMaxBuiltBytes is RESOURCE_EXHAUSTED.
#ifndef LLM_WORKER_FRONTEND_CHAT_JINJA_TEXT_FILTERS_H_
#define LLM_WORKER_FRONTEND_CHAT_JINJA_TEXT_FILTERS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/frontend/chat/jinja_value.h"

namespace llm::frontend::jinja {

// markupsafe.escape's text: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(const std::string& s);

// str.center(width) with spaces: the extra space of an odd margin goes left when width is odd.
std::string Center(const std::string& s, int64_t width);

// jinja2's truncate(s, length, killwords, end, leeway): `s` itself when it has at most length +
// leeway characters; else its first length - len(end) characters (without `killwords`, cut back
// to the last space) followed by `end`. An error when length < len(end) or leeway < 0.
absl::StatusOr<std::string> Truncate(const std::string& s, int64_t length, bool killwords,
                                     const std::string& end, int64_t leeway);

// jinja2's wordwrap: each line of str.splitlines wrapped by textwrap.wrap (expand_tabs and
// replace_whitespace off, so tabs count as one character and are kept), all joined by
// `wrapstring`. An error for a width below 1.
struct WrapOptions {
  int64_t width = 79;
  bool break_long_words = true;
  std::string wrapstring = "\n";
  bool break_on_hyphens = true;
};
absl::StatusOr<std::string> WordWrap(const std::string& s, const WrapOptions& options);

// jinja2's urlencode: a string or a scalar quoted as urllib.parse.quote (UTF-8, '/' kept); a dict
// or a list of (key, value) pairs as a query string "k=v&..." ('/' quoted, spaces as '+'). An
// undefined value gives "".
absl::StatusOr<std::string> UrlEncode(const Value& v);

// jinja2's xmlattr: ` key="value"` for each item of a dict whose value is neither none nor
// undefined, both escaped (HtmlEscape, a Markup value as it is), joined by spaces, with a leading
// space if `autospace` and any. An error for a key with whitespace, '/', '>' or '='.
absl::StatusOr<std::string> XmlAttr(const Value& v, bool autospace);

// jinja2's filesizeformat: float(v) as "1 Byte", "N Bytes" below the base, else "%.1f" of the
// largest unit (kB, MB... or KiB, MiB... with `binary`) up to YB. An error for values float()
// rejects.
absl::StatusOr<std::string> FileSizeFormat(const Value& v, bool binary);

// jinja2's pprint: pprint.pformat(v), which is repr() with dict keys sorted when it fits in 80
// characters. A list or dict whose repr is longer, or a string with inner whitespace, is an error
// (pformat would break it across lines, which is not implemented); so is a function (whose repr
// holds an address).
absl::StatusOr<std::string> PrettyPrint(const Value& v);

// jinja2's striptags: comments and tags (`<!-- -->`, `<...>`) removed, whitespace runs collapsed to
// one space and trimmed, then HTML character references decoded as Python's html.unescape.
std::string StripTags(const std::string& s);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_JINJA_TEXT_FILTERS_H_
