#include "common/tls/grpc_tls.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

namespace llm::tls {

namespace {

unsigned Interval(const TlsFiles& f) {
  return static_cast<unsigned>(f.reload_seconds > 0 ? f.reload_seconds : 1);
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& files) {
  if (files.cert_file.empty()) return grpc::InsecureServerCredentials();
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key_file, files.cert_file, files.ca_file, Interval(files));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!files.ca_file.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsFiles& files,
                                                             grpc::ChannelArguments* args) {
  if (files.ca_file.empty()) return grpc::InsecureChannelCredentials();
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key_file, files.cert_file, files.ca_file, Interval(files));
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider);
  options.watch_root_certs();
  if (!files.cert_file.empty()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  if (!files.server_name.empty() && args != nullptr) {
    args->SetSslTargetNameOverride(files.server_name);
  }
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace llm::tls
