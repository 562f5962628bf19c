// Raw-socket helpers for the tests of the router's OpenAI-compatible HTTP front: read one
// HTTP/1.1 response (Content-Length or chunked), read to the peer's close, send, build a POST,
// split an SSE body into its JSON events.
#ifndef LLM_TESTS_ROUTER_HTTP_TEST_UTIL_H_
#define LLM_TESTS_ROUTER_HTTP_TEST_UTIL_H_

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llm::router {

struct HttpReply {
  int status = 0;
  std::string headers;  // raw, lower-cased names
  std::string body;     // de-chunked
  bool complete = false;
};

// Reads one HTTP/1.1 response from `fd` (Content-Length or chunked).
inline HttpReply ReadReply(int fd, int timeout_ms = 10000) {
  HttpReply r;
  std::string in;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t head_end = std::string::npos;
  auto more = [&] {
    pollfd p{fd, POLLIN, 0};
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          end - std::chrono::steady_clock::now())
                                          .count());
    if (left <= 0 || ::poll(&p, 1, left) <= 0) return false;
    char buf[65536];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return false;
    in.append(buf, static_cast<size_t>(n));
    return true;
  };
  while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
    if (!more()) return r;
  }
  std::sscanf(in.c_str(), "HTTP/1.1 %d", &r.status);
  r.headers = in.substr(0, head_end);
  for (char& c : r.headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string rest = in.substr(head_end + 4);
  in = rest;
  if (r.headers.find("transfer-encoding: chunked") != std::string::npos) {
    size_t at = 0;
    for (;;) {
      size_t eol;
      while ((eol = in.find("\r\n", at)) == std::string::npos) {
        if (!more()) return r;
      }
      const size_t size = std::stoul(in.substr(at, eol - at), nullptr, 16);
      while (in.size() < eol + 2 + size + 2) {
        if (!more()) return r;
      }
      if (size == 0) {
        r.complete = true;
        return r;
      }
      r.body += in.substr(eol + 2, size);
      at = eol + 2 + size + 2;
    }
  }
  const size_t cl = r.headers.find("content-length: ");
  const size_t length = cl == std::string::npos ? 0 : std::stoul(r.headers.substr(cl + 16));
  while (in.size() < length) {
    if (!more()) return r;
  }
  r.body = in.substr(0, length);
  r.complete = true;
  return r;
}

// Everything `fd` delivers until the peer closes it (or 10 s pass).
inline std::string ReadToEnd(int fd) {
  std::string in;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          end - std::chrono::steady_clock::now())
                          .count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return in;
    char buf[65536];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return in;
    in.append(buf, static_cast<size_t>(n));
  }
}

inline size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

inline void Send(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

inline std::string Post(const std::string& path, const std::string& body,
                        const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The events of an SSE body: the text of each, between blank lines.
inline std::vector<std::string> SseEvents(const std::string& body) {
  std::vector<std::string> out;
  for (size_t at = 0, end = 0; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    out.push_back(body.substr(at, end - at));
  }
  return out;
}

// The JSON events of an SSE body, and whether it ended with [DONE].
inline std::vector<nlohmann::json> Events(const std::string& body, bool* done) {
  std::vector<nlohmann::json> out;
  *done = false;
  for (const std::string& event : SseEvents(body)) {
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    out.push_back(nlohmann::json::parse(data));
  }
  return out;
}

// The data of each typed SSE event ("event: TYPE\ndata: {...}": the Responses API's), each
// checked to carry its TYPE as "type".
inline std::vector<nlohmann::json> TypedEvents(const std::string& body) {
  std::vector<nlohmann::json> out;
  for (const std::string& event : SseEvents(body)) {
    const size_t newline = event.find('\n');
    EXPECT_EQ(event.rfind("event: ", 0), 0u) << event;
    EXPECT_EQ(event.compare(newline, 7, "\ndata: "), 0) << event;
    out.push_back(nlohmann::json::parse(event.substr(newline + 7), nullptr, false));
    EXPECT_EQ(out.back()["type"], event.substr(7, newline - 7)) << event;
  }
  return out;
}

}  // namespace llm::router

#endif  // LLM_TESTS_ROUTER_HTTP_TEST_UTIL_H_
