#include "router/relay/security.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace llm::router {

namespace {

struct CtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using CtxPtr = std::unique_ptr<SSL_CTX, CtxFree>;

std::string SslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// What identifies a file's version: modification time and size.
std::string Stamp(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return "-";
  return absl::StrCat(st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, ":", st.st_size, ":", st.st_ino);
}

// Marks an SSL of the OpenAI front's HTTP/1.1 port (SSL_set_app_data).
char kHttp1Marker;

// ALPN: h2 on the gRPC port, http/1.1 on the HTTP port.
int SelectProtocol(SSL* ssl, const unsigned char** out, unsigned char* outlen,
                   const unsigned char* in, unsigned int inlen, void*) {
  static const unsigned char kH2[] = {2, 'h', '2'};
  static const unsigned char kHttp1[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  const bool http1 = SSL_get_app_data(ssl) == &kHttp1Marker;
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, http1 ? kHttp1 : kH2,
                            http1 ? sizeof(kHttp1) : sizeof(kH2), in,
                            inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;  // that protocol only
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

absl::Status UseIdentity(SSL_CTX* ctx, const tls::TlsFiles& f, const std::string& prefix) {
  if (SSL_CTX_use_certificate_chain_file(ctx, f.cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".cert_file: ", f.cert_file, ": ", SslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, f.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".key_file: ", f.key_file, ": ", SslError()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CtxPtr> ServerContext(const tls::TlsFiles& f) {
  CtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  if (absl::Status st = UseIdentity(ctx.get(), f, "tls"); !st.ok()) return st;
  SSL_CTX_set_alpn_select_cb(ctx.get(), SelectProtocol, nullptr);
  if (!f.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), f.ca_file.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tls.client_ca_file: ", f.ca_file, ": ", SslError()));
    }
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return ctx;
}

absl::StatusOr<CtxPtr> UpstreamContext(const tls::TlsFiles& f) {
  CtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (SSL_CTX_load_verify_locations(ctx.get(), f.ca_file.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("upstream_tls.ca_file: ", f.ca_file, ": ", SslError()));
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (!f.cert_file.empty()) {
    if (absl::Status st = UseIdentity(ctx.get(), f, "upstream_tls"); !st.ok()) return st;
  }
  static const unsigned char kH2[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kH2, sizeof(kH2));
  return ctx;
}

}  // namespace

struct RelaySecurity::Loaded {
  CtxPtr server, upstream;
  std::string token;
  std::string stamps;  // of every file, to see changes
};

RelaySecurity::RelaySecurity(const SecurityOptions& options) : options_(options) {}
RelaySecurity::~RelaySecurity() = default;

std::string RelaySecurity::Stamps() const {
  const auto& o = options_;
  return absl::StrCat(Stamp(o.server.cert_file), Stamp(o.server.key_file), Stamp(o.server.ca_file),
                      Stamp(o.upstream.cert_file), Stamp(o.upstream.key_file),
                      Stamp(o.upstream.ca_file), Stamp(o.token_file));
}

// The combinations of keys were checked with the configuration (tls::Check*Files); building the
// contexts parses every file and names the key and the file of any error.
absl::Status RelaySecurity::LoadAll(Loaded* out) const {
  const auto& o = options_;
  out->stamps = Stamps();
  if (server_tls()) {
    auto ctx = ServerContext(o.server);
    if (!ctx.ok()) return ctx.status();
    out->server = *std::move(ctx);
  }
  if (upstream_tls()) {
    auto ctx = UpstreamContext(o.upstream);
    if (!ctx.ok()) return ctx.status();
    out->upstream = *std::move(ctx);
  }
  if (token_required()) {
    std::string token;
    if (absl::Status st = tls::ReadFile(o.token_file, "auth.token_file", &token); !st.ok()) {
      return st;
    }
    out->token = std::string(absl::StripAsciiWhitespace(token));
    if (out->token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("auth.token_file: ", o.token_file, ": empty token"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RelaySecurity>> RelaySecurity::Create(
    const SecurityOptions& options) {
  auto s = std::unique_ptr<RelaySecurity>(new RelaySecurity(options));
  auto loaded = std::make_unique<Loaded>();
  if (absl::Status st = s->LoadAll(loaded.get()); !st.ok()) return st;
  s->current_ = std::move(loaded);
  return s;
}

void RelaySecurity::Reload() {
  {
    // Nothing changed on disk (the usual case): nothing to parse.
    const std::string stamps = Stamps();
    std::lock_guard<std::mutex> lock(mu_);
    if (stamps == current_->stamps) return;
  }
  auto loaded = std::make_unique<Loaded>();
  absl::Status st = LoadAll(loaded.get());
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    // Files mid-rotation (a key written before its certificate) load on a later pass.
    const std::string err(st.message());
    if (err != last_error_)
      std::fprintf(stderr, "llm-router: keeping the old TLS/auth files: %s\n", err.c_str());
    last_error_ = err;
    return;
  }
  last_error_.clear();
  current_ = std::move(loaded);
  std::fprintf(stderr, "llm-router: reloaded TLS/auth files\n");
}

SSL* RelaySecurity::NewServerSsl(bool http1) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_->server == nullptr) return nullptr;
  SSL* ssl = SSL_new(current_->server.get());  // holds its own reference to the context
  SSL_set_accept_state(ssl);
  if (http1) SSL_set_app_data(ssl, &kHttp1Marker);
  return ssl;
}

SSL* RelaySecurity::NewUpstreamSsl(const std::string& host) const {
  SSL* ssl;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_->upstream == nullptr) return nullptr;
    ssl = SSL_new(current_->upstream.get());
  }
  SSL_set_connect_state(ssl);
  const std::string& name =
      options_.upstream.server_name.empty() ? host : options_.upstream.server_name;
  in6_addr ip{};
  const bool is_ip =
      inet_pton(AF_INET, name.c_str(), &ip) == 1 || inet_pton(AF_INET6, name.c_str(), &ip) == 1;
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, name.c_str());
    SSL_set1_host(ssl, name.c_str());
  }
  return ssl;
}

bool RelaySecurity::TokenMatches(std::string_view authorization) const {
  std::string token;
  {
    std::lock_guard<std::mutex> lock(mu_);
    token = current_->token;
  }
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() != kBearer.size() + token.size() ||
      authorization.substr(0, kBearer.size()) != kBearer) {
    return false;
  }
  return CRYPTO_memcmp(authorization.data() + kBearer.size(), token.data(), token.size()) == 0;
}

}  // namespace llm::router
