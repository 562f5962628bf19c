// TLS and mutual TLS on both hops (client -> llm-router -> llm-worker), the router's bearer
// token, file reloads without a restart, the plaintext health ports, and what the logs leave
// out. Certificates are made at test time with the openssl command (Debian package openssl).
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/tls/grpc_tls.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/grpc_test_util.h"
#include "tests/test_util.h"

namespace llm {
namespace {

using llm::testing::GreedyRequest;
using llm::testing::RouterProcess;
using llm::testing::RunCommand;
using llm::testing::WorkerProcess;

constexpr char kModel[] = "models/tinystories-656k";
constexpr char kToken[] = "s3cret-token-7f1d";

// A CA and certificates it signs, in `dir`.
class Pki {
 public:
  explicit Pki(std::string dir) : dir_(std::move(dir)) {}
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // name.crt / name.key: a self-signed CA.
  void MakeCa(const std::string& name) {
    Make(name, {"-addext", "basicConstraints=critical,CA:TRUE", "-addext",
                "keyUsage=critical,keyCertSign,cRLSign"});
  }
  // name.crt / name.key signed by `ca`, valid for DNS names llm-worker and llm-router and for
  // 127.0.0.1.
  void MakeLeaf(const std::string& name, const std::string& ca) {
    Make(name, {"-CA", Path(ca + ".crt"), "-CAkey", Path(ca + ".key"), "-addext",
                "subjectAltName=DNS:llm-worker,DNS:llm-router,IP:127.0.0.1", "-addext",
                "basicConstraints=critical,CA:FALSE", "-addext",
                "extendedKeyUsage=serverAuth,clientAuth"});
  }

 private:
  // A P-256 key and a certificate for CN=name, valid two days, with `extra` openssl arguments.
  void Make(const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {"/usr/bin/openssl",
                                     "req",
                                     "-x509",
                                     "-newkey",
                                     "ec",
                                     "-pkeyopt",
                                     "ec_paramgen_curve:prime256v1",
                                     "-nodes",
                                     "-keyout",
                                     Path(name + ".key"),
                                     "-out",
                                     Path(name + ".crt"),
                                     "-subj",
                                     "/CN=" + name,
                                     "-days",
                                     "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << "openssl (Debian package openssl) failed: " << r.err;
  }
  std::string dir_;
};

// A client channel: TLS when `ca` is set, with a client certificate when `cert` is.
std::shared_ptr<grpc::Channel> Channel(const std::string& target, const Pki& pki,
                                       const std::string& ca, const std::string& cert = "") {
  tls::TlsFiles f;
  if (!ca.empty()) f.ca_file = pki.Path(ca + ".crt");
  if (!cert.empty()) {
    f.cert_file = pki.Path(cert + ".crt");
    f.key_file = pki.Path(cert + ".key");
  }
  f.server_name = ca.empty() ? "" : "llm-router";
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // no connection shared across cases
  auto creds = tls::ChannelCredentials(f, &args);
  return grpc::CreateCustomChannel(target, creds, args);
}

struct Outcome {
  grpc::Status status;
  std::string text;
};

Outcome Call(const std::shared_ptr<grpc::Channel>& channel, const std::string& prompt,
             const std::string& token) {
  auto stub = llm::v1::Generation::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  auto reader = stub->Generate(&ctx, GreedyRequest(prompt, 20));
  llm::v1::GenerateResponse resp;
  Outcome o;
  while (reader->Read(&resp)) o.text += resp.text();
  o.status = reader->Finish();
  return o;
}

// GET `path` over HTTPS (ALPN http/1.1) on 127.0.0.1:port trusting `ca`, with the client
// certificate `cert` and the bearer `token` when not empty: the status line's code, or -1 when
// no TLS session could be made.
int HttpsGet(int port, const Pki& pki, const std::string& ca, const std::string& cert,
             const std::string& path, const std::string& token) {
  std::signal(SIGPIPE, SIG_IGN);  // OpenSSL writes with write(): a refused session must not kill us
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_load_verify_locations(ctx, pki.Path(ca + ".crt").c_str(), nullptr);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (!cert.empty()) {
    SSL_CTX_use_certificate_chain_file(ctx, pki.Path(cert + ".crt").c_str());
    SSL_CTX_use_PrivateKey_file(ctx, pki.Path(cert + ".key").c_str(), SSL_FILETYPE_PEM);
  }
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof(kAlpn));
  const int fd = llm::testing::ConnectLoopback(port);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  int code = -1;
  if (SSL_connect(ssl) == 1) {
    const std::string req =
        absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: llm-router\r\n",
                     token.empty() ? "" : "Authorization: Bearer " + token + "\r\n",
                     "Connection: close\r\n\r\n");
    SSL_write(ssl, req.data(), static_cast<int>(req.size()));
    char buf[4096];
    const int n = SSL_read(ssl, buf, sizeof(buf) - 1);
    if (n > 0) {
      buf[n] = 0;
      std::sscanf(buf, "HTTP/1.1 %d", &code);
    }
  }
  SSL_free(ssl);
  ::close(fd);
  SSL_CTX_free(ctx);
  return code;
}

// The port on the "health (plaintext) on port N" line of a process's output.
int HealthPort(llm::testing::ChildProcess& p) {
  const std::string line = p.WaitForLine("health (plaintext) on port", 10000);
  if (line.empty()) return 0;
  return std::atoi(line.c_str() + line.find("on port") + 8);
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLM_REQUIRE_SHARED(kModel);
    dir_ = llm::testing::MakeTempDir("pki");
    pki_ = std::make_unique<Pki>(dir_);
    pki_->MakeCa("ca");
    pki_->MakeCa("other-ca");
    pki_->MakeLeaf("worker", "ca");
    pki_->MakeLeaf("router", "ca");
    pki_->MakeLeaf("router-client", "ca");  // the router's identity toward workers
    pki_->MakeLeaf("client", "ca");
    pki_->MakeLeaf("stranger", "other-ca");
    std::ofstream(pki_->Path("token")) << kToken << "\n";
    prompt_ = llm::testing::LoadGolden().prompt;
  }

  std::vector<std::string> WorkerTls() const {
    return {"--tls.cert_file",      pki_->Path("worker.crt"),
            "--tls.key_file",       pki_->Path("worker.key"),
            "--tls.client_ca_file", pki_->Path("ca.crt"),
            "--tls.reload_seconds", "1"};
  }
  std::vector<std::string> RouterTls(bool upstream_cert = true) const {
    std::vector<std::string> f = {"--tls.cert_file",
                                  pki_->Path("router.crt"),
                                  "--tls.key_file",
                                  pki_->Path("router.key"),
                                  "--tls.client_ca_file",
                                  pki_->Path("ca.crt"),
                                  "--upstream_tls.ca_file",
                                  pki_->Path("ca.crt"),
                                  "--upstream_tls.server_name",
                                  "llm-worker",
                                  "--auth.token_file",
                                  pki_->Path("token"),
                                  "--tls.reload_seconds",
                                  "1",
                                  "--router.health_listen",
                                  "127.0.0.1:0"};
    if (upstream_cert) {
      for (const std::string& s :
           {std::string("--upstream_tls.cert_file"), pki_->Path("router-client.crt"),
            std::string("--upstream_tls.key_file"), pki_->Path("router-client.key")}) {
        f.push_back(s);
      }
    }
    return f;
  }

  std::string dir_;
  std::unique_ptr<Pki> pki_;
  std::string prompt_;
};

TEST_F(SecurityTest, MutualTlsOnBothHopsAndTheTokenAreEnforced) {
  std::vector<std::string> wflags = WorkerTls();
  wflags.insert(wflags.end(), {"--server.health_listen", "127.0.0.1:0"});
  auto worker = WorkerProcess::Start(kModel, wflags);
  const int worker_health = HealthPort(worker->process());
  auto router = RouterProcess::Start(worker->target(), RouterTls());
  ASSERT_TRUE(router->WaitReady(1)) << router->process().Output();
  const int router_health = HealthPort(router->process());
  const std::string target = router->target();

  // The right CA, a client certificate and the token: the answer.
  const Outcome ok = Call(Channel(target, *pki_, "ca", "client"), prompt_, kToken);
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_FALSE(ok.text.empty());

  // Refused: a plaintext client, a client trusting another CA, a client without a
  // certificate, one whose certificate another CA signed; then a missing or wrong token.
  for (const auto& [what, channel] :
       std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>>{
           {"plaintext", Channel(target, *pki_, "")},
           {"wrong CA", Channel(target, *pki_, "other-ca", "client")},
           {"no client certificate", Channel(target, *pki_, "ca")},
           {"client certificate of another CA", Channel(target, *pki_, "ca", "stranger")}}) {
    const Outcome o = Call(channel, prompt_, kToken);
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << what << ": " << o.status.error_message();
  }
  auto good = Channel(target, *pki_, "ca", "client");
  Outcome o = Call(good, prompt_, "");
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << o.status.error_message();
  o = Call(good, prompt_, "not-the-token");
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << o.status.error_message();

  // The OpenAI HTTP port speaks HTTPS with the same certificate, client CA and token.
  ASSERT_GT(router->http_port(), 0);
  EXPECT_EQ(HttpsGet(router->http_port(), *pki_, "ca", "client", "/v1/models", kToken), 200);
  EXPECT_EQ(HttpsGet(router->http_port(), *pki_, "ca", "client", "/v1/models", ""), 401);
  EXPECT_EQ(HttpsGet(router->http_port(), *pki_, "other-ca", "client", "/v1/models", kToken), -1);
  EXPECT_EQ(HttpsGet(router->http_port(), *pki_, "ca", "", "/v1/models", kToken), -1);
  {
    // Plaintext HTTP to the HTTPS port gets no HTTP answer.
    const int fd = llm::testing::ConnectLoopback(router->http_port());
    const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[64] = {};
    const ssize_t n = ::recv(fd, buf, sizeof(buf) - 1, 0);
    EXPECT_TRUE(n <= 0 || std::string(buf, static_cast<size_t>(n)).rfind("HTTP/1.1", 0) != 0);
    ::close(fd);
  }

  // The worker itself refuses plaintext and certificate-less clients.
  o = Call(Channel(worker->target(), *pki_, ""), prompt_, "");
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE) << o.status.error_message();

  // Plaintext health ports for probes: ready and live.
  ASSERT_GT(worker_health, 0);
  ASSERT_GT(router_health, 0);
  auto wh = grpc::CreateChannel(absl::StrCat("127.0.0.1:", worker_health),
                                grpc::InsecureChannelCredentials());
  EXPECT_EQ(llm::testing::HealthStatus(wh), 1);
  EXPECT_EQ(llm::testing::HealthStatus(wh, "liveness"), 1);
  auto rh = grpc::CreateChannel(absl::StrCat("127.0.0.1:", router_health),
                                grpc::InsecureChannelCredentials());
  EXPECT_EQ(llm::testing::HealthStatus(rh), 1);

  // Neither the token nor the prompt appears in the logs.
  for (auto* p : {&worker->process(), &router->process()}) {
    EXPECT_EQ(p->Output().find(kToken), std::string::npos);
    EXPECT_EQ(p->Output().find(prompt_), std::string::npos);
  }
}

TEST_F(SecurityTest, TheWorkerRefusesARouterWithoutAClientCertificate) {
  auto worker = WorkerProcess::Start(kModel, WorkerTls());
  auto router = RouterProcess::Start(worker->target(), RouterTls(/*upstream_cert=*/false));
  // The router's load watch cannot get through, so the worker never becomes ready to it.
  EXPECT_FALSE(router->WaitReady(1, 1500));
  const Outcome o = Call(Channel(router->target(), *pki_, "ca", "client"), prompt_, kToken);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE) << o.status.error_message();
}

TEST_F(SecurityTest, RotatedCertificatesAndTokensApplyWithoutARestart) {
  auto worker = WorkerProcess::Start(kModel, WorkerTls());
  auto router = RouterProcess::Start(worker->target(), RouterTls());
  ASSERT_TRUE(router->WaitReady(1)) << router->process().Output();
  ASSERT_TRUE(Call(Channel(router->target(), *pki_, "ca", "client"), prompt_, kToken).status.ok());

  // The router's serving certificate moves to another CA, and the token changes. Files are
  // replaced by rename, as Kubernetes updates a Secret volume.
  pki_->MakeLeaf("router2", "other-ca");
  std::filesystem::rename(pki_->Path("router2.crt"), pki_->Path("router.crt"));
  std::filesystem::rename(pki_->Path("router2.key"), pki_->Path("router.key"));
  std::ofstream(pki_->Path("token.new")) << "rotated-token\n";
  std::filesystem::rename(pki_->Path("token.new"), pki_->Path("token"));

  // Within a few reload periods: clients trusting the new CA get through with the new token;
  // the old token is refused.
  grpc::Status last;
  ASSERT_TRUE(llm::testing::WaitFor(
      [&] {
        last =
            Call(Channel(router->target(), *pki_, "other-ca", "client"), prompt_, "rotated-token")
                .status;
        return last.ok();
      },
      std::chrono::seconds(10)))
      << last.error_message() << "\n"
      << router->process().Output();
  const Outcome old_token =
      Call(Channel(router->target(), *pki_, "other-ca", "client"), prompt_, kToken);
  EXPECT_EQ(old_token.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(router->process().Output().find("rotated-token"), std::string::npos);
}

// A certificate caught half-written (truncated by a `cp` or a shell redirect) or replaced by
// something that is not a certificate: gRPC aborted the process on an empty file (an assertion)
// and refused every new handshake on a bad one. The checked copies (verified_tls_files.h) keep
// the old set, the reason is logged naming the key, and a good file is taken afterwards.
TEST_F(SecurityTest, ABadOrTruncatedCertificateKeepsTheOldOneAndTheProcessAlive) {
  auto worker = WorkerProcess::Start(kModel, WorkerTls());
  auto router = RouterProcess::Start(worker->target(), RouterTls());
  ASSERT_TRUE(router->WaitReady(1)) << router->process().Output();
  ASSERT_TRUE(Call(Channel(router->target(), *pki_, "ca", "client"), prompt_, kToken).status.ok());

  std::ofstream(pki_->Path("worker.crt"), std::ios::trunc).close();         // empty
  std::ofstream(pki_->Path("router-client.crt")) << "not a certificate\n";  // garbage
  EXPECT_NE(worker->process().WaitForLine("keeping the old TLS files: tls.cert_file", 10000), "")
      << worker->process().Output();
  EXPECT_NE(
      router->process().WaitForLine("keeping the old TLS files: upstream_tls.cert_file", 10000), "")
      << router->process().Output();
  // Both live, and new connections (a fresh channel straight to the worker) still handshake.
  EXPECT_TRUE(worker->process().running()) << worker->process().Output();
  EXPECT_TRUE(router->process().running()) << router->process().Output();
  const Outcome direct = Call(Channel(worker->target(), *pki_, "ca", "client"), prompt_, "");
  EXPECT_TRUE(direct.status.ok()) << direct.status.error_message();
  EXPECT_TRUE(Call(Channel(router->target(), *pki_, "ca", "client"), prompt_, kToken).status.ok());

  // A good certificate again (another leaf of the same CA) is taken.
  pki_->MakeLeaf("worker2", "ca");
  std::filesystem::rename(pki_->Path("worker2.key"), pki_->Path("worker.key"));
  std::filesystem::rename(pki_->Path("worker2.crt"), pki_->Path("worker.crt"));
  grpc::Status last;
  EXPECT_TRUE(llm::testing::WaitFor(
      [&] {
        last = Call(Channel(worker->target(), *pki_, "ca", "client"), prompt_, "").status;
        return last.ok();
      },
      std::chrono::seconds(10)))
      << last.error_message() << "\n"
      << worker->process().Output();
  EXPECT_TRUE(worker->process().running());
}

// The worker's private copies of its TLS files (verified_tls_files.h) go with it when a
// signal ends it before it serves: it ended with std::_Exit, which left them in $TMPDIR.
TEST_F(SecurityTest, TlsCopiesAreRemovedWhenASignalEndsTheLoad) {
  const std::string tmp = llm::testing::MakeTempDir("tmpdir");
  std::vector<std::string> argv = {"/usr/bin/env",
                                   "TMPDIR=" + tmp,
                                   llm::testing::BinPath("llm-worker"),
                                   "--model.path",
                                   "random:qwen2-0.5b",
                                   "--engine.cpu_threads",
                                   "1",
                                   "--server.listen",
                                   "127.0.0.1:0",
                                   "--server.metrics_listen",
                                   ""};
  const std::vector<std::string> tls = WorkerTls();
  argv.insert(argv.end(), tls.begin(), tls.end());
  auto w = llm::testing::ChildProcess::Start(argv);
  // Loading: the copies are made before the model is (the listening port needs them).
  auto copies = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(tmp)) {
      n += e.path().filename().string().rfind("llm-tls-", 0) == 0;
    }
    return n;
  };
  ASSERT_TRUE(llm::testing::WaitFor([&] { return copies() != 0 || !w->running(); },
                                    std::chrono::milliseconds(5000)))
      << w->Output();
  ASSERT_EQ(copies(), 1) << w->Output();
  ASSERT_EQ(w->Output().find("serving"), std::string::npos) << "loaded too fast to test";
  w->Signal(SIGTERM);
  EXPECT_EQ(w->WaitExit(5000), 0) << w->Output();
  EXPECT_NE(w->Output().find("before serving: exiting"), std::string::npos) << w->Output();
  EXPECT_EQ(copies(), 0);
}

TEST(SecurityConfigTest, BadTlsFilesAreNamedAtStart) {
  const std::string dir = llm::testing::MakeTempDir("badtls");
  std::ofstream(dir + "/junk.pem") << "not a certificate\n";
  auto r = RunCommand({llm::testing::BinPath("llm-router"), "--discovery.workers", "127.0.0.1:1",
                       "--tls.cert_file", dir + "/junk.pem", "--tls.key_file", dir + "/junk.pem"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("tls.cert_file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("junk.pem"), std::string::npos) << r.err;
  r = RunCommand({llm::testing::BinPath("llm-router"), "--discovery.workers", "127.0.0.1:1",
                  "--upstream_tls.cert_file", dir + "/junk.pem"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("upstream_tls.ca_file"), std::string::npos) << r.err;
  r = RunCommand({llm::testing::BinPath("llm-worker"), "--model.path", "/nowhere",
                  "--tls.cert_file", dir + "/missing.pem", "--tls.key_file", dir + "/junk.pem"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("tls.cert_file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing.pem"), std::string::npos) << r.err;
  r = RunCommand({llm::testing::BinPath("llm-router"), "--discovery.workers", "127.0.0.1:1",
                  "--auth.token_file", dir + "/no-token"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("auth.token_file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace llm
