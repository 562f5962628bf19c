// The relay's secrets: the OpenSSL contexts of both legs (client -> router, router -> worker)
// and the bearer token clients must send, each rebuilt when its files change. Reload() runs
// on the router's reload thread; the loops take the current values as connections open and
// calls arrive. Thread-safe.
#ifndef LLM_ROUTER_RELAY_SECURITY_H_
#define LLM_ROUTER_RELAY_SECURITY_H_

#include <openssl/ssl.h>

#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tls/tls_files.h"

namespace llm::router {

struct SecurityOptions {
  tls::TlsFiles server;    // tls.*: cert_file + key_file turn TLS on; ca_file requires clients'
  tls::TlsFiles upstream;  // upstream_tls.*: ca_file turns TLS on
  std::string token_file;  // auth.token_file: empty means no token check
};

class RelaySecurity {
 public:
  // Loads every file now; errors name the key and the file.
  static absl::StatusOr<std::unique_ptr<RelaySecurity>> Create(const SecurityOptions& options);
  ~RelaySecurity();

  bool server_tls() const { return !options_.server.cert_file.empty(); }
  bool upstream_tls() const { return !options_.upstream.ca_file.empty(); }
  bool token_required() const { return !options_.token_file.empty(); }

  // A new SSL object for an accepted connection (accept state); null for plaintext. `http1`:
  // the OpenAI front's port, whose ALPN is http/1.1 (the gRPC port's is h2).
  SSL* NewServerSsl(bool http1 = false) const;
  // A new SSL object for a connection to `host` (connect state, SNI, name or IP checked in
  // the certificate: upstream_tls.server_name when set); null for plaintext.
  SSL* NewUpstreamSsl(const std::string& host) const;
  // Whether `authorization` (the header's value) carries the token. Constant time.
  bool TokenMatches(std::string_view authorization) const;

  // Rebuilds what changed on disk. A file that no longer loads keeps the previous value and
  // is reported once per change, naming the key.
  void Reload();

 private:
  struct Loaded;
  explicit RelaySecurity(const SecurityOptions& options);
  // Modification time, size and inode of every file: what tells a change.
  std::string Stamps() const;
  absl::Status LoadAll(Loaded* out) const;

  const SecurityOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<Loaded> current_;
  std::string last_error_;
};

}  // namespace llm::router

#endif  // LLM_ROUTER_RELAY_SECURITY_H_
