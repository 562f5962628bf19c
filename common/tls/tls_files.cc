#include "common/tls/tls_files.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace llm::tls {

namespace {

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

absl::Status Invalid(const std::string& key, const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", path, ": ", why));
}

// The first certificate of a PEM file (a chain or a CA bundle), checked to parse.
absl::Status LoadCert(const std::string& path, const std::string& key,
                      std::unique_ptr<X509, X509Free>* out) {
  std::string pem;
  if (absl::Status st = ReadFile(path, key, &pem); !st.ok()) return st;
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) return Invalid(key, path, "no PEM certificate: " + OpenSslError());
  if (out != nullptr) *out = std::move(cert);
  return absl::OkStatus();
}

absl::Status CheckIdentity(const TlsFiles& f, const std::string& prefix) {
  if (f.cert_file.empty() != f.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".cert_file, ", prefix, ".key_file: give both or neither"));
  }
  if (f.cert_file.empty()) return absl::OkStatus();
  std::unique_ptr<X509, X509Free> cert;
  if (absl::Status st = LoadCert(f.cert_file, prefix + ".cert_file", &cert); !st.ok()) return st;
  std::string pem;
  if (absl::Status st = ReadFile(f.key_file, prefix + ".key_file", &pem); !st.ok()) return st;
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<EVP_PKEY, KeyFree> pkey(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (pkey == nullptr) {
    return Invalid(prefix + ".key_file", f.key_file, "no PEM private key: " + OpenSslError());
  }
  if (X509_check_private_key(cert.get(), pkey.get()) != 1) {
    ERR_clear_error();
    return Invalid(prefix + ".key_file", f.key_file,
                   "does not match the certificate in " + f.cert_file);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadFile(const std::string& path, const std::string& key, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Invalid(key, path, "cannot be read");
  std::ostringstream s;
  s << f.rdbuf();
  *out = s.str();
  return absl::OkStatus();
}

absl::Status CheckServerFiles(const TlsFiles& f, const std::string& prefix) {
  if (f.cert_file.empty() && f.key_file.empty()) {
    if (!f.ca_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ".client_ca_file: needs ", prefix,
                                                     ".cert_file and ", prefix,
                                                     ".key_file (mutual TLS is TLS first)"));
    }
    return absl::OkStatus();
  }
  if (absl::Status st = CheckIdentity(f, prefix); !st.ok()) return st;
  if (!f.ca_file.empty()) return LoadCert(f.ca_file, prefix + ".client_ca_file", nullptr);
  return absl::OkStatus();
}

absl::Status CheckClientFiles(const TlsFiles& f, const std::string& prefix) {
  if (f.ca_file.empty()) {
    if (!f.cert_file.empty() || !f.key_file.empty() || !f.server_name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ".ca_file: needed when any other ",
                                                     prefix, " key is set (TLS is on)"));
    }
    return absl::OkStatus();
  }
  if (absl::Status st = LoadCert(f.ca_file, prefix + ".ca_file", nullptr); !st.ok()) return st;
  return CheckIdentity(f, prefix);
}

}  // namespace llm::tls
