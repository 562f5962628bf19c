// The typed Server-Sent Events of a stream ("event: TYPE\ndata: {...}\n\n", the Responses and
// Messages APIs' shape), split for a test to read.
#ifndef LLM_TESTS_ROUTER_SSE_EVENTS_H_
#define LLM_TESTS_ROUTER_SSE_EVENTS_H_

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llm::router::openai {

// (type, data) of each event, in order; a malformed event fails the test.
inline std::vector<std::pair<std::string, nlohmann::json>> Events(const std::string& sse) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    const std::string event = sse.substr(at, end - at);
    EXPECT_EQ(event.rfind("event: ", 0), 0u) << event;
    const size_t newline = event.find('\n');
    const std::string type = event.substr(7, newline - 7);
    EXPECT_EQ(event.substr(newline + 1, 6), "data: ");
    out.emplace_back(type, nlohmann::json::parse(event.substr(newline + 7)));
    at = end + 2;
  }
  return out;
}

}  // namespace llm::router::openai

#endif  // LLM_TESTS_ROUTER_SSE_EVENTS_H_
