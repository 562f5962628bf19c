#include "router/relay/tls_pipe.h"

#include <openssl/err.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llm::router::relay {

namespace {

constexpr size_t kChunk = 64 * 1024;

std::string TlsError(SSL* ssl, int rc) {
  const int e = SSL_get_error(ssl, rc);
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    return buf;
  }
  if (e == SSL_ERROR_ZERO_RETURN) return "closed by peer";
  if (e == SSL_ERROR_SYSCALL) return "unexpected end of stream";
  return "error " + std::to_string(e);
}

}  // namespace

TlsPipe::TlsPipe(SSL* ssl, std::string alpn) : ssl_(ssl), alpn_(std::move(alpn)) {
  rbio_ = BIO_new(BIO_s_mem());
  wbio_ = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(rbio_, -1);  // empty means "want more", not end of stream
  SSL_set_bio(ssl_, rbio_, wbio_);
}

TlsPipe::~TlsPipe() { SSL_free(ssl_); }

absl::Status TlsPipe::Handshake() {
  if (handshake_done_) return absl::OkStatus();
  const int rc = SSL_do_handshake(ssl_);
  if (rc == 1) {
    handshake_done_ = true;
    const unsigned char* alpn = nullptr;
    unsigned int alpn_len = 0;
    SSL_get0_alpn_selected(ssl_, &alpn, &alpn_len);
    if (alpn_len != 0 && std::string_view(reinterpret_cast<const char*>(alpn), alpn_len) != alpn_) {
      return absl::FailedPreconditionError(
          absl::StrCat("TLS: the peer chose a protocol other than ", alpn_, " (ALPN)"));
    }
    return absl::OkStatus();
  }
  const int e = SSL_get_error(ssl_, rc);
  if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
    return absl::UnavailableError("TLS handshake failed: " + TlsError(ssl_, rc));
  }
  return absl::OkStatus();
}

absl::Status TlsPipe::Receive(const uint8_t* data, size_t n,
                              absl::FunctionRef<bool(const uint8_t*, size_t)> plain) {
  BIO_write(rbio_, data, static_cast<int>(n));
  if (!handshake_done_) {
    if (absl::Status st = Handshake(); !st.ok()) return st;
    if (!handshake_done_) return absl::OkStatus();  // the next flight goes out with Drain
  }
  uint8_t buf[kChunk];
  for (;;) {
    const int rc = SSL_read(ssl_, buf, sizeof(buf));
    if (rc > 0) {
      if (!plain(buf, static_cast<size_t>(rc))) return absl::OkStatus();
      continue;
    }
    const int e = SSL_get_error(ssl_, rc);
    if (e == SSL_ERROR_WANT_READ) return absl::OkStatus();
    return absl::UnavailableError("TLS: " + TlsError(ssl_, rc));
  }
}

absl::Status TlsPipe::Encrypt(const uint8_t* data, size_t n) {
  if (SSL_write(ssl_, data, static_cast<int>(n)) <= 0) {
    return absl::UnavailableError("TLS: " + TlsError(ssl_, -1));
  }
  return absl::OkStatus();
}

void TlsPipe::Drain(std::string* out) {
  const size_t pending = BIO_ctrl_pending(wbio_);
  if (pending == 0) return;
  const size_t at = out->size();
  out->resize(at + pending);
  const int got = BIO_read(wbio_, out->data() + at, static_cast<int>(pending));
  out->resize(at + static_cast<size_t>(std::max(got, 0)));
}

}  // namespace llm::router::relay
