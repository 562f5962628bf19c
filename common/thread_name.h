// Names the calling thread (shown by top -H, perf and debuggers). At most 15 characters.
#ifndef LLM_COMMON_THREAD_NAME_H_
#define LLM_COMMON_THREAD_NAME_H_

#include <string>

namespace llm {

void SetCurrentThreadName(const std::string& name);

}  // namespace llm

#endif  // LLM_COMMON_THREAD_NAME_H_
