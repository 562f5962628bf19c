// llm-bench router: what llm-router costs, side by side with nginx's grpc_pass in front of the
// same worker, in one run. The worker is a fake (tools/fake_worker) that streams small messages
// as fast as the transport takes them, so the proxy is the bottleneck:
//   - overhead: one-message Generate calls one after another, straight to the worker, through
//     llm-router and through nginx; the latency each proxy adds (p50, p99);
//   - relay: concurrent streams of many messages for a fixed time through each; messages per
//     second, and per CPU-second the proxy process used (its /proc counters), i.e. per core.
// The router's OpenAI HTTP front (target "http": streaming chat completions on keep-alive
// HTTP/1.1 connections to the same router) is measured the same two ways; `http_vs_router_wall`
// is its streamed-message rate over the router's gRPC rate.
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "llm/v1/generation.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "tools/fake_worker/fake_worker.h"

namespace llm::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<grpc::Channel> Channel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

bool WaitServing(const std::string& target, int timeout_ms) {
  auto ch = Channel(target);
  return ch->WaitForConnected(std::chrono::system_clock::now() +
                              std::chrono::milliseconds(timeout_ms));
}

// One Generate call to the end; the number of messages, or -1 on error (its status in `error`).
int64_t Stream(llm::v1::Generation::Stub& stub, grpc::Status* error = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  llm::v1::GenerateRequest req;
  req.set_text("x");
  auto reader = stub.Generate(&ctx, req);
  llm::v1::GenerateResponse resp;
  int64_t n = 0;
  while (reader->Read(&resp)) ++n;
  const grpc::Status st = reader->Finish();
  if (!st.ok() && error != nullptr) *error = st;
  return st.ok() ? n : -1;
}

// A blocking keep-alive HTTP/1.1 connection that sends streaming chat completions.
class HttpChat {
 public:
  explicit HttpChat(int port) : fd_(ConnectLoopback(port)) {
    const std::string body =
        R"({"model": "fake-model", "stream": true, "messages": [{"role": "user", "content": "x"}]})";
    request_ = absl::StrCat("POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n",
                            "Content-Type: application/json\r\nContent-Length: ", body.size(),
                            "\r\n\r\n", body);
  }
  ~HttpChat() {
    if (fd_ >= 0) ::close(fd_);
  }
  // One call to the end: the content messages streamed (SSE events less the finish chunk), or
  // -1 on any error.
  int64_t Stream() {
    if (fd_ < 0 || ::send(fd_, request_.data(), request_.size(), MSG_NOSIGNAL) !=
                       static_cast<ssize_t>(request_.size())) {
      return -1;
    }
    in_.clear();
    size_t head = std::string::npos;
    while ((head = in_.find("\r\n\r\n")) == std::string::npos) {
      if (!More()) return -1;
    }
    if (in_.compare(0, 12, "HTTP/1.1 200") != 0) return -1;
    // Chunked body: walk the chunks, counting events, until the zero chunk.
    size_t at = head + 4;
    int64_t events = 0;
    for (;;) {
      size_t eol;
      while ((eol = in_.find("\r\n", at)) == std::string::npos) {
        if (!More()) return -1;
      }
      const size_t size = std::strtoul(in_.c_str() + at, nullptr, 16);
      while (in_.size() < eol + 2 + size + 2) {
        if (!More()) return -1;
      }
      if (size == 0) break;
      for (size_t p = in_.find("data: {", eol + 2); p != std::string::npos && p < eol + 2 + size;
           p = in_.find("data: {", p + 1)) {
        ++events;
      }
      at = eol + 2 + size + 2;
    }
    return events - 1;
  }

 private:
  bool More() {
    char buf[65536];
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n <= 0) return false;
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  static int ConnectLoopback(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd);
      return -1;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
  }
  int fd_;
  std::string request_;
  std::string in_;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct Target {
  std::string name;
  std::string address;
  pid_t pid = -1;     // the proxy process (none for direct)
  int http_port = 0;  // > 0: the router's HTTP front (streaming chat), not gRPC
};

// One call to `t` on the connection of `stub` or `http`: messages, or -1.
int64_t Call(const Target& t, llm::v1::Generation::Stub* stub, HttpChat* http,
             grpc::Status* error = nullptr) {
  return t.http_port > 0 ? http->Stream() : Stream(*stub, error);
}

struct RelayRound {
  double messages = 0;
  double wall_seconds = 0;
  double cpu_seconds = -1;  // the proxy's (and its children's) CPU time; -1 for direct
};

// `streams` threads, each calling Generate one call after another on its own connection to
// `t` for `seconds`; every message they read is counted.
absl::StatusOr<RelayRound> MeasureRelay(const Target& t, int streams, double seconds) {
  std::atomic<int64_t> relayed{0};
  std::atomic<bool> failed{false};
  const double cpu_before = t.pid > 0 ? ProcessCpuSeconds(t.pid) : 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&] {
      auto stub = llm::v1::Generation::NewStub(Channel(t.address));
      std::unique_ptr<HttpChat> http;
      if (t.http_port > 0) http = std::make_unique<HttpChat>(t.http_port);
      while (Clock::now() < until) {
        const int64_t n = Call(t, stub.get(), http.get());
        if (n < 0) {
          failed = true;
          return;
        }
        relayed += n;
      }
    });
  }
  for (auto& th : threads) th.join();
  if (failed) return absl::InternalError(t.name + ": a relayed stream failed");
  RelayRound m;
  m.messages = static_cast<double>(relayed.load());
  m.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (t.pid > 0) m.cpu_seconds = ProcessCpuSeconds(t.pid) - cpu_before;
  return m;
}

// The settings of one run, read from its flags once.
struct RouterBenchSettings {
  int64_t requests = 0, streams = 0, messages = 0, proxy_threads = 0, rounds = 0;
  double seconds = 0;
  std::string router_bin, router_flags, nginx_bin;
};

void AddRouterBenchFlags(FlagSet& flags) {
  flags.Value("requests", "one-message calls per target for the overhead", "2000")
      .Value("streams", "concurrent streams for the relay throughput", "8")
      .Value("messages", "messages per relayed stream", "2000")
      .Value("seconds", "relay measurement time per target and round", "2")
      .Value("rounds", "interleaved relay rounds (the median is reported)", "5")
      .Value("proxy-threads",
             "event loops of each proxy: llm-router's proxy.threads and nginx's "
             "worker_processes, the same for both",
             "1")
      .Value("router", "llm-router binary", "")
      .Value("router-flags", "extra llm-router flags, space-separated", "")
      .Value("nginx", "nginx binary (empty: skip nginx)", "/usr/sbin/nginx");
}

absl::StatusOr<RouterBenchSettings> SettingsFromFlags(const FlagSet& flags) {
  RouterBenchSettings s;
  for (auto [name, to] : {std::pair<const char*, int64_t*>{"requests", &s.requests},
                          {"streams", &s.streams},
                          {"messages", &s.messages},
                          {"proxy-threads", &s.proxy_threads},
                          {"rounds", &s.rounds}}) {
    auto v = flags.GetInt(name);
    if (!v.ok()) return v.status();
    *to = *v;
  }
  auto seconds = flags.GetDouble("seconds");
  if (!seconds.ok()) return seconds.status();
  s.seconds = *seconds;
  s.router_bin =
      flags.GetString("router").empty() ? SelfDir() + "/llm-router" : flags.GetString("router");
  s.router_flags = flags.GetString("router-flags");
  s.nginx_bin = flags.GetString("nginx");
  return s;
}

// llm-router in front of `worker`, listening for gRPC and HTTP on free ports; its two targets
// are added to `targets`.
absl::StatusOr<std::unique_ptr<Subprocess>> StartRouter(const RouterBenchSettings& s,
                                                        const std::string& worker,
                                                        const std::string& dir,
                                                        std::vector<Target>& targets) {
  auto router_port = FreePort();
  if (!router_port.ok()) return router_port.status();
  auto http_port = FreePort();
  if (!http_port.ok()) return http_port.status();
  const std::string grpc_address = absl::StrCat("127.0.0.1:", *router_port);
  std::vector<std::string> argv = {s.router_bin,
                                   "--router.listen",
                                   grpc_address,
                                   "--router.metrics_listen",
                                   "",
                                   "--router.http_listen",
                                   absl::StrCat("127.0.0.1:", *http_port),
                                   "--discovery.workers",
                                   worker,
                                   "--proxy.threads",
                                   absl::StrCat(s.proxy_threads)};
  for (absl::string_view f : absl::StrSplit(s.router_flags, ' ', absl::SkipEmpty())) {
    argv.emplace_back(f);
  }
  auto router = Subprocess::Start(argv, dir + "/router.log");
  if (!router.ok()) return router.status();
  targets.push_back({"router", grpc_address, (*router)->pid()});
  targets.push_back({"http", grpc_address, (*router)->pid(), *http_port});
  return router;
}

// nginx, one process per proxy thread, grpc_pass to `worker` with upstream keepalive; its
// target is added to `targets`.
absl::StatusOr<std::unique_ptr<Subprocess>> StartNginx(const RouterBenchSettings& s,
                                                       const std::string& worker,
                                                       const std::string& dir,
                                                       std::vector<Target>& targets) {
  auto port = FreePort();
  if (!port.ok()) return port.status();
  std::ofstream(dir + "/nginx.conf")
      << "worker_processes " << s.proxy_threads << ";\ndaemon off;\n"
      << (s.proxy_threads == 1 ? "master_process off;\n" : "") << "pid " << dir
      << "/nginx.pid;\nerror_log " << dir << "/nginx-error.log warn;\n"
      << "events { worker_connections 4096; }\nhttp {\n  access_log off;\n"
      << "  client_body_temp_path " << dir << "/body;\n  proxy_temp_path " << dir
      << "/proxy;\n  fastcgi_temp_path " << dir << "/fastcgi;\n  uwsgi_temp_path " << dir
      << "/uwsgi;\n  scgi_temp_path " << dir << "/scgi;\n"
      << "  upstream worker { server " << worker << "; keepalive 64; }\n"
      << "  server {\n    listen 127.0.0.1:" << *port << " http2;\n"
      << "    location / { grpc_pass grpc://worker; }\n  }\n}\n";
  auto nginx = Subprocess::Start(
      {s.nginx_bin, "-p", dir, "-c", dir + "/nginx.conf", "-e", dir + "/nginx-error.log"},
      dir + "/nginx.log");
  if (!nginx.ok()) return nginx.status();
  targets.push_back({"nginx", absl::StrCat("127.0.0.1:", *port), (*nginx)->pid()});
  return nginx;
}

// Every target answers, and the router (targets[1]) has the worker's first load report, without
// which it does not route.
absl::Status WaitTargets(const std::vector<Target>& targets, const std::string& dir) {
  for (const Target& t : targets) {
    if (!WaitServing(t.address, 10000)) {
      return absl::UnavailableError(
          absl::StrCat(t.name, " at ", t.address, " did not come up (logs in ", dir, ")"));
    }
  }
  for (int i = 0; i < 500; ++i) {
    auto stub = llm::v1::Generation::NewStub(Channel(targets[1].address));
    if (Stream(*stub) == 1) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::OkStatus();  // the measurement's first failed call names the router
}

// The overhead's latencies per target: sequential one-message calls, interleaved in blocks so
// drift hits all alike, after a warm-up.
absl::StatusOr<std::vector<std::vector<double>>> CallLatencies(const std::vector<Target>& targets,
                                                               int64_t requests) {
  std::vector<std::unique_ptr<llm::v1::Generation::Stub>> stubs;
  std::vector<std::unique_ptr<HttpChat>> https;
  for (const Target& t : targets) {
    stubs.push_back(llm::v1::Generation::NewStub(Channel(t.address)));
    https.push_back(t.http_port > 0 ? std::make_unique<HttpChat>(t.http_port) : nullptr);
  }
  std::vector<std::vector<double>> us(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    for (int i = 0; i < 50; ++i) Call(targets[t], stubs[t].get(), https[t].get());
  }
  constexpr int kBlock = 100;
  for (int64_t done = 0; done < requests; done += kBlock) {
    for (size_t t = 0; t < targets.size(); ++t) {
      for (int i = 0; i < kBlock; ++i) {
        const auto start = Clock::now();
        grpc::Status error;
        if (Call(targets[t], stubs[t].get(), https[t].get(), &error) != 1) {
          return absl::InternalError(
              absl::StrCat(targets[t].name, ": call failed: ", error.error_message()));
        }
        us[t].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    }
  }
  return us;
}

// 1. Overhead: each target's p50 and p99, and what each proxy adds to the direct calls'.
absl::StatusOr<nlohmann::json> MeasureOverhead(const std::vector<Target>& targets,
                                               int64_t requests) {
  auto us = CallLatencies(targets, requests);
  if (!us.ok()) return us.status();
  nlohmann::json o = {{"requests_per_target", requests}};
  const double d50 = Percentile((*us)[0], 0.5), d99 = Percentile((*us)[0], 0.99);
  for (size_t t = 0; t < targets.size(); ++t) {
    const double p50 = Percentile((*us)[t], 0.5), p99 = Percentile((*us)[t], 0.99);
    o[targets[t].name] = {{"us_p50", p50}, {"us_p99", p99}};
    if (t > 0) {
      o[targets[t].name]["added_us_p50"] = p50 - d50;
      o[targets[t].name]["added_us_p99"] = p99 - d99;
    }
  }
  return o;
}

// 2. Relay throughput: `streams` concurrent streams of `messages` messages, for `seconds` per
// target, in `rounds` interleaved rounds; the median round of each target is reported.
absl::StatusOr<nlohmann::json> MeasureRelayRounds(const RouterBenchSettings& s,
                                                  const std::vector<Target>& targets) {
  nlohmann::json r = {{"streams", s.streams},
                      {"messages_per_call", s.messages},
                      {"seconds", s.seconds},
                      {"rounds", s.rounds}};
  std::vector<std::vector<RelayRound>> measured(targets.size());
  for (int64_t round = 0; round < s.rounds; ++round) {
    for (size_t t = 0; t < targets.size(); ++t) {
      auto m = MeasureRelay(targets[t], static_cast<int>(s.streams), s.seconds);
      if (!m.ok()) return m.status();
      measured[t].push_back(*m);
    }
  }
  std::vector<double> per_core(targets.size(), -1), wall(targets.size(), -1);
  for (size_t t = 0; t < targets.size(); ++t) {
    std::vector<double> rate, core;
    for (const RelayRound& m : measured[t]) {
      rate.push_back(m.messages / m.wall_seconds);
      if (m.cpu_seconds > 0) core.push_back(m.messages / m.cpu_seconds);
    }
    wall[t] = Percentile(rate, 0.5);
    nlohmann::json o = {{"messages_per_s", wall[t]}, {"messages_per_s_rounds", rate}};
    if (!core.empty()) {
      per_core[t] = Percentile(core, 0.5);
      o["messages_per_proxy_core_s"] = per_core[t];
      o["messages_per_proxy_core_s_rounds"] = core;
    }
    r[targets[t].name] = o;
  }
  // targets: direct, router, http[, nginx]
  r["http_vs_router_wall"] = wall[2] / wall[1];
  if (targets.size() == 4 && per_core[1] > 0 && per_core[3] > 0) {
    r["router_vs_nginx_per_core"] = per_core[1] / per_core[3];
    r["router_vs_nginx_wall"] = wall[1] / wall[3];
  }
  return r;
}

}  // namespace

int RunRouterBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench router";
  auto parsed = ParseSettings(cmd, args, AddRouterBenchFlags, SettingsFromFlags);
  if (!parsed.settings) return parsed.exit_code;
  const RouterBenchSettings& s = *parsed.settings;
  tools::FakeBehaviour one;
  one.messages = 1;
  auto worker = tools::FakeWorker::Start(one);
  if (worker == nullptr) return Fail(cmd, absl::InternalError("fake worker did not start"));
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("llm-bench-router-", ::getpid()))
          .string();
  std::filesystem::create_directories(dir);
  std::vector<Target> targets = {{"direct", worker->address()}};
  auto router = StartRouter(s, worker->address(), dir, targets);
  if (!router.ok()) return Fail(cmd, router.status());
  std::unique_ptr<Subprocess> nginx;
  nlohmann::json out = {{"benchmark", "router"},
                        {"cores", std::thread::hardware_concurrency()},
                        {"proxy_threads", s.proxy_threads}};
  if (!s.nginx_bin.empty() && std::filesystem::exists(s.nginx_bin)) {
    auto started = StartNginx(s, worker->address(), dir, targets);
    if (!started.ok()) return Fail(cmd, started.status());
    nginx = *std::move(started);
  } else {
    out["nginx_skipped"] = "nginx not found at '" + s.nginx_bin + "' (Debian package nginx)";
  }
  if (absl::Status st = WaitTargets(targets, dir); !st.ok()) return Fail(cmd, st);
  auto overhead = MeasureOverhead(targets, s.requests);
  if (!overhead.ok()) return Fail(cmd, overhead.status());
  out["overhead"] = *overhead;
  tools::FakeBehaviour many;
  many.messages = static_cast<int>(s.messages);
  worker->SetBehaviour(many);
  auto relay = MeasureRelayRounds(s, targets);
  if (!relay.ok()) return Fail(cmd, relay.status());
  out["relay"] = *relay;
  std::printf("%s\n", out.dump(2).c_str());
  router->reset();
  nginx.reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace llm::bench
