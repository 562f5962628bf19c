// The files that configure one side of a TLS hop, and their checks. Paths come from
// configuration keys; `key_prefix` ("tls", "upstream_tls") is used to name the key in errors.
//
// Server side: cert_file + key_file (PEM; the certificate file may hold a chain) turn TLS on;
// ca_file, when set, makes it mutual: clients must present a certificate signed by it.
// Client side: ca_file (the roots the server's certificate must chain to) turns TLS on;
// cert_file + key_file are the client's certificate for mutual TLS; server_name is the name
// checked in the server's certificate (and sent as SNI) instead of the address's host.
#ifndef LLM_COMMON_TLS_TLS_FILES_H_
#define LLM_COMMON_TLS_TLS_FILES_H_

#include <string>

#include "absl/status/status.h"

namespace llm::tls {

struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  std::string server_name;  // client side only
  int reload_seconds = 10;  // how often the files are checked for changes
};

// Server side: TLS is on when cert_file is set. Checks that cert and key come together, that
// every file parses as PEM and that the key matches the certificate. INVALID_ARGUMENT naming
// `key_prefix`.cert_file etc. and the file.
absl::Status CheckServerFiles(const TlsFiles& files, const std::string& key_prefix);
// Client side: TLS is on when ca_file is set; cert and key are optional (mutual TLS) but come
// together. Same checks.
absl::Status CheckClientFiles(const TlsFiles& files, const std::string& key_prefix);

// The whole file, or an error naming `key` and the path.
absl::Status ReadFile(const std::string& path, const std::string& key, std::string* out);

}  // namespace llm::tls

#endif  // LLM_COMMON_TLS_TLS_FILES_H_
