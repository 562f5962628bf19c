// The pieces of the gRPC-over-HTTP/2 protocol the relay reads and writes itself: the
// grpc-timeout header and the grpc-message trailer's percent-encoding
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md).
#ifndef LLM_ROUTER_RELAY_GRPC_WIRE_H_
#define LLM_ROUTER_RELAY_GRPC_WIRE_H_

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace llm::router::relay {

// "100m" -> 100 ms; nullopt when malformed (at most 8 digits and one of H M S m u n).
std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value);
// The shortest exact-enough encoding of `remaining` (rounded up to a millisecond; at least 1m).
std::string FormatGrpcTimeout(std::chrono::nanoseconds remaining);

// Percent-encodes bytes outside 0x20..0x7E and '%' (grpc-message).
std::string PercentEncode(std::string_view message);
std::string PercentDecode(std::string_view value);

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_GRPC_WIRE_H_
