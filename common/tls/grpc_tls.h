// gRPC credentials from TlsFiles, reloading the files when they change (gRPC's file-watcher
// certificate provider, checked every TlsFiles::reload_seconds): a rotated certificate (a
// cert-manager Secret update) needs no restart. Give it the checked copies of
// verified_tls_files.h, never the operator's files: gRPC aborts the process on an empty
// certificate and refuses every handshake on a bad one.
#ifndef LLM_COMMON_TLS_GRPC_TLS_H_
#define LLM_COMMON_TLS_GRPC_TLS_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "common/tls/tls_files.h"

namespace llm::tls {

// Plaintext when files.cert_file is empty; TLS otherwise, requiring and verifying a client
// certificate when files.ca_file is set.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles& files);

// Plaintext when files.ca_file is empty; TLS verifying the server against ca_file otherwise,
// presenting cert_file/key_file when set. files.server_name, when set, goes into `args` as the
// name to check (the target is usually an IP address).
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsFiles& files,
                                                             grpc::ChannelArguments* args);

}  // namespace llm::tls

#endif  // LLM_COMMON_TLS_GRPC_TLS_H_
