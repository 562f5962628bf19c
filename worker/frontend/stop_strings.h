// Stop-string detection over streamed text: finds the first stop string in the output, and
// holds back text that may be the beginning of one so it is never streamed and then retracted.
#ifndef LLM_WORKER_FRONTEND_STOP_STRINGS_H_
#define LLM_WORKER_FRONTEND_STOP_STRINGS_H_

#include <string>
#include <string_view>
#include <vector>

namespace llm::frontend {

// One per request; not thread-safe.
class StopStringMatcher {
 public:
  struct Result {
    std::string text;      // text safe to emit now
    bool stopped = false;  // a stop string was found; generation ends
    std::string matched;   // the stop string found
  };

  // `stops` must be non-empty strings. With `include_stop` the stop string itself is emitted.
  StopStringMatcher(std::vector<std::string> stops, bool include_stop);

  // Adds newly decoded text. After a Result with stopped, further calls return nothing.
  Result Add(std::string_view delta);
  // The held-back text, at the end of generation without a stop.
  std::string Flush();

  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  bool include_stop_;
  bool stopped_ = false;
  std::string pending_;  // not yet emitted; may begin a stop string
};

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_STOP_STRINGS_H_
