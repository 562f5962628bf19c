// OpenSSL on memory BIOs between a non-blocking socket and a protocol parser (internal to
// router/relay). The connection reads bytes from its socket and hands them to Receive, which
// drives the handshake and passes the decrypted bytes on; what the protocol writes goes through
// Encrypt; Drain moves every TLS record OpenSSL produced (handshake flights, alerts, data) into
// the connection's output buffer. No socket I/O happens here, so the socket code of a
// connection is the same with or without TLS.
#ifndef LLM_ROUTER_RELAY_TLS_PIPE_H_
#define LLM_ROUTER_RELAY_TLS_PIPE_H_

#include <openssl/ssl.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace llm::router::relay {

class TlsPipe {
 public:
  // Takes `ssl`, set up for its side (accept or connect state). `alpn`: the protocol the peer
  // must have chosen when it used ALPN ("h2", "http/1.1").
  TlsPipe(SSL* ssl, std::string alpn);
  ~TlsPipe();
  TlsPipe(const TlsPipe&) = delete;
  TlsPipe& operator=(const TlsPipe&) = delete;

  bool handshake_done() const { return handshake_done_; }
  // Bytes from the socket: continues the handshake, then gives each decrypted run to `plain`
  // (which returns false to stop: the connection closed). An error says why the connection
  // must close ("TLS handshake failed: ...").
  absl::Status Receive(const uint8_t* data, size_t n,
                       absl::FunctionRef<bool(const uint8_t*, size_t)> plain);
  // Drives the handshake where it waits on us (a client's first flight).
  absl::Status Handshake();
  // Encrypts `n` bytes of the protocol's output (after the handshake).
  absl::Status Encrypt(const uint8_t* data, size_t n);
  // Appends the TLS records waiting to be written to `out`.
  void Drain(std::string* out);

 private:
  SSL* ssl_;
  BIO* rbio_;  // socket -> OpenSSL
  BIO* wbio_;  // OpenSSL -> out
  std::string alpn_;
  bool handshake_done_ = false;
};

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_TLS_PIPE_H_
