// Python 3.11's html.unescape, which jinja2's striptags filter applies (through markupsafe): the
// HTML5 character references in a UTF-8 string decoded by HTML5's rules.
#ifndef LLM_WORKER_FRONTEND_CHAT_HTML_UNESCAPE_H_
#define LLM_WORKER_FRONTEND_CHAT_HTML_UNESCAPE_H_

#include <string>

namespace llm::frontend::jinja {

// Each match of &(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?) replaced, as html.unescape
// does: a numeric reference by its character (HTML5's replacements for 0 and 0x80..0x9f, U+FFFD
// for surrogates and values past U+10FFFF, nothing for the noncharacters and most controls); a
// named one by its text, or by the text of its longest legacy prefix ("&ampx" is "&x") followed
// by the rest; anything else left as it is.
std::string HtmlUnescape(const std::string& s);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_HTML_UNESCAPE_H_
