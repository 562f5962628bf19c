// Python's two string-formatting mini-languages as chat templates use them: the `%` operator
// ("%s: %d" % (a, b), "%(name)s" % d) and str.format ("{} {0} {name:>8}"). Values print as
// Python's str() / repr() would (jinja_value.h).
//
// Supported: %s %r %d %i %f %F %e %E %g %G %x %X %o %c %% with the flags "-+ 0#", a width and a
// precision ('*' is not); str.format fields by position, index or name with a spec of
// [[fill]align][sign][0][width][,][.precision][type]. Anything else is INVALID_ARGUMENT.
#ifndef LLM_WORKER_FRONTEND_CHAT_JINJA_FORMAT_H_
#define LLM_WORKER_FRONTEND_CHAT_JINJA_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/frontend/chat/jinja_value.h"

namespace llm::frontend::jinja {

// `format % args`: `args` is a tuple (several values), a dict (for %(name)s) or one value.
absl::StatusOr<std::string> PercentFormat(const std::string& format, const Value& args);

// format.format(*args.pos, **args.kw).
absl::StatusOr<std::string> StrFormat(const std::string& format, const Args& args);

}  // namespace llm::frontend::jinja

#endif  // LLM_WORKER_FRONTEND_CHAT_JINJA_FORMAT_H_
