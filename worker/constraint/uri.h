// URLs for JSON Schema's `format: uri` (Pydantic's AnyUrl and HttpUrl) and the IP addresses
// of `format: ipv4` and `ipv6`, as byte regexes (byte_regex.h). Pure logic.
//
// The language is the http and https URLs among RFC 3986's absolute URIs: a model asked for a
// URI writes a web address, and Pydantic's HttpUrl, which the schema cannot tell from AnyUrl,
// takes only those schemes. So every string of it is a valid `uri` and a valid HttpUrl:
//
//   http[s]://host[:port][/path][?query][#fragment]
//
// - host: an IPv4 address (below), or dot-separated labels of letters and digits with single
//   hyphens inside, the last starting with a letter (a registered name: Pydantic's parser
//   reads a host whose last label is a number as an IPv4 address, and one starting "xn--" as
//   Punycode);
// - port: 0..65535, without leading zeros;
// - path, query and fragment: RFC 3986's pchar (unreserved, sub-delims, ':', '@', a percent
//   escape of two hex digits), '/' anywhere after the path's first, '?' in the query and
//   fragment.
//
// None of its bytes is one JSON escapes, so the pattern stands for the string's content as
// written.
//
// With a maximum length (HttpUrl's 2083) the parts are bounded so that no string of the
// language is longer: the host takes at most 5 labels of at most 63 characters (DNS's limit)
// within a quarter of it (fewer, longer ones for a short maximum), and the path, the query and the
// fragment share the rest 6:3:1 in units of at most 3 characters (a percent escape is one unit), so
// a long path may be refused where the string would have room (and past kMaxBoundedUriLength the
// parts are bounded as for it). A language with a counter of every character would be exact, but
// its automaton would hold length x states.
#ifndef LLM_WORKER_CONSTRAINT_URI_H_
#define LLM_WORKER_CONSTRAINT_URI_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace llm::constraint {

// The shortest string of the language ("http://a").
inline constexpr int kMinUriLength = 8;
// The least maximum length served.
inline constexpr int kMinUriMaxLength = 64;
// A greater maximum length bounds the parts as this one does.
inline constexpr int kMaxBoundedUriLength = 4096;

// The language above, no longer than `max_length` characters when given. INVALID_ARGUMENT
// (the message says what is served) when max_length is below kMinUriMaxLength.
absl::StatusOr<std::string> UriRegex(std::optional<int> max_length);

// IPv4 addresses: dotted quads of 0..255 without leading zeros (as Python's ipaddress reads
// them); `format: ipv4`.
std::string Ipv4Regex();
// IPv6 addresses: RFC 4291's eight groups of 1..4 hex digits, or k groups, "::" and at most
// 7 - k more (no embedded IPv4 and no zone: a subset every IPv6 parser reads); `format: ipv6`.
std::string Ipv6Regex();

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_URI_H_
