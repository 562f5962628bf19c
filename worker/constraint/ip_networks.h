// IP networks and interfaces as Pydantic writes their JSON Schema (`format: ipv4network`,
// `ipv6network`, `ipvanynetwork`, `ipv4interface`, `ipv6interface`, `ipvanyinterface`), as byte
// regexes (byte_regex.h) of the string's content. Pure logic.
//
// An interface is an address (uri.h's) and a prefix length: `10.1.2.3/24`, `fe80::1/64`.
// A network is what Python's ip_network takes in its default strict mode: no bit set past the
// prefix. For IPv4 every such network is in the language as address/prefix (`10.0.0.0/8`,
// `192.168.4.0/22`; not Python's other spellings, a netmask or no prefix). For
// IPv6 one spelling of each is: the groups the prefix covers (a group the prefix cuts written in
// four digits, the bits past it zero), then `::` for the zeros, unless all eight are written
// (`2001:db8::/32`, `fe80:0000:0000:0000:8000::/65`, `::/0`); other spellings of the same
// network (`2001:0db8:0:0::/32`) are not, so every string is one strict parsing takes.
#ifndef LLM_WORKER_CONSTRAINT_IP_NETWORKS_H_
#define LLM_WORKER_CONSTRAINT_IP_NETWORKS_H_

#include <string>

namespace llm::constraint {

std::string Ipv4NetworkRegex();
std::string Ipv6NetworkRegex();
std::string Ipv4InterfaceRegex();
std::string Ipv6InterfaceRegex();

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_IP_NETWORKS_H_
