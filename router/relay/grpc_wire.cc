#include "router/relay/grpc_wire.h"

#include <cstdint>

namespace llm::router::relay {

std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view v) {
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  int64_t n = 0;
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    if (v[i] < '0' || v[i] > '9') return std::nullopt;
    n = n * 10 + (v[i] - '0');
  }
  // Longer timeouts than this (grpc-go sends "2562048H" for "none") are clamped, so adding one
  // to a time point cannot overflow.
  constexpr int64_t kMaxNs = int64_t{100} * 365 * 24 * 3600 * 1000000000;
  int64_t unit_ns;
  switch (v.back()) {
    case 'H':
      unit_ns = int64_t{3600} * 1000000000;
      break;
    case 'M':
      unit_ns = int64_t{60} * 1000000000;
      break;
    case 'S':
      unit_ns = 1000000000;
      break;
    case 'm':
      unit_ns = 1000000;
      break;
    case 'u':
      unit_ns = 1000;
      break;
    case 'n':
      unit_ns = 1;
      break;
    default:
      return std::nullopt;
  }
  if (n > kMaxNs / unit_ns) return std::chrono::nanoseconds(kMaxNs);
  return std::chrono::nanoseconds(n * unit_ns);
}

std::string FormatGrpcTimeout(std::chrono::nanoseconds remaining) {
  int64_t ms = (remaining.count() + 999999) / 1000000;
  if (ms < 1) ms = 1;
  if (ms < 100000000) return std::to_string(ms) + "m";
  int64_t s = (ms + 999) / 1000;
  if (s < 100000000) return std::to_string(s) + "S";
  return std::to_string((s + 3599) / 3600) + "H";
}

std::string PercentEncode(std::string_view m) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(m.size());
  for (unsigned char c : m) {
    if (c >= 0x20 && c <= 0x7E && c != '%') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string PercentDecode(std::string_view v) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '%' && i + 2 < v.size() && hex(v[i + 1]) >= 0 && hex(v[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(v[i + 1]) * 16 + hex(v[i + 2])));
      i += 2;
    } else {
      out.push_back(v[i]);
    }
  }
  return out;
}

}  // namespace llm::router::relay
