// llm-bench serve: a closed-loop load generator against a worker or router. C client lanes
// each send Generate requests one after another until N requests are done; per request it
// records time to first token, time per output token and end-to-end latency as the client sees
// them. Several concurrencies (--concurrency 1,8,32) run one after another against the same
// target in one invocation, so their throughputs can be compared side by side.
// --api openai drives a router's OpenAI HTTP API instead (streaming chat completions, or
// completions with --endpoint completions): the same closed loop on keep-alive HTTP/1.1
// connections, all driven by one epoll thread; tokens are the final usage chunk's count.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "llm/v1/generation.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"

namespace llm::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct RequestSample {
  double ttft_s = -1;
  double tpot_s = -1;
  double e2e_s = 0;
  int tokens = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

// One level's closed loop: `concurrency` lanes, each starting its next request when the last
// one ends, until `requests` have been started. Calls use gRPC's callback API, so the client
// spends no thread per stream (it shares the machine with the server it measures).
// Token ids drawn from a seed, in [3, 3 + vocab).
std::vector<int32_t> SeededIds(uint64_t seed, int n, int32_t vocab = 500) {
  std::vector<int32_t> out;
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (int k = 0; k < n; ++k) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out.push_back(3 + static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab)));
  }
  return out;
}

// --workload prefix:G:P: request i's prompt is group (i mod G)'s P-token prefix followed by 16
// tokens of its own (token ids drawn from a fixed seed; ids in [3, 3 + vocab)).
// --workload chat:T: each client lane holds conversations of T turns: a 64-token system prompt,
// then per turn 16 user tokens; every turn resends the whole history, the previous answers'
// generated tokens included, as chat clients do.
struct Workload {
  int groups = 0;  // prefix:G:P; 0 (and turns 0): every request sends the base prompt
  std::vector<std::vector<int32_t>> prefixes;
  int32_t vocab = 500;
  int turns = 0;  // chat:T

  void Apply(int index, llm::v1::GenerateRequest* r) const {
    if (groups == 0) return;
    auto* ids = r->mutable_token_ids();
    ids->clear_ids();
    for (int32_t t : prefixes[static_cast<size_t>(index % groups)]) ids->add_ids(t);
    uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
    for (int k = 0; k < 16; ++k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      ids->add_ids(3 + static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab)));
    }
  }
};

struct Level {
  int requests = 0;
  std::chrono::seconds timeout{600};  // per request
  llm::v1::GenerateRequest base;
  const Workload* workload = nullptr;
  std::vector<std::unique_ptr<llm::v1::Generation::Stub>> stubs;
  std::atomic<int> next{0};
  std::mutex mu;
  std::condition_variable cv;
  int active_lanes = 0;                // guarded by mu
  std::vector<RequestSample> samples;  // guarded by mu
  std::map<std::string, int> errors;   // guarded by mu
  // chat:T: each lane's conversation (a lane runs one request at a time: no lock needed).
  struct Conversation {
    std::vector<int32_t> history;
    int turn = 0;
    int number = 0;
  };
  std::vector<Conversation> conversations;
};

void StartNext(Level* level, int lane);

class BenchCall : public grpc::ClientReadReactor<llm::v1::GenerateResponse> {
 public:
  BenchCall(Level* level, int lane, int index) : level_(level), lane_(lane) {
    request_ = level->base;
    if (level->workload != nullptr) level->workload->Apply(index, &request_);
    if (level->workload != nullptr && level->workload->turns > 0) {
      Level::Conversation& c = level->conversations[static_cast<size_t>(lane)];
      if (c.history.empty()) {
        c.history = SeededIds(static_cast<uint64_t>(lane) * 100003 + c.number, 64);
      }
      prompt_ = c.history;
      const auto user = SeededIds(static_cast<uint64_t>(index) * 7919 + 17, 16);
      prompt_.insert(prompt_.end(), user.begin(), user.end());
      auto* ids = request_.mutable_token_ids();
      ids->clear_ids();
      for (int32_t t : prompt_) ids->add_ids(t);
    }
    request_.set_request_id("bench-" + std::to_string(index));
    request_.mutable_sampling()->set_seed(static_cast<uint64_t>(index));
  }
  void Start() {
    t0_ = Clock::now();
    // A stream that never ends fails its request instead of holding the benchmark forever.
    context_.set_deadline(std::chrono::system_clock::now() + level_->timeout);
    level_->stubs[lane_ % level_->stubs.size()]->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (response_.token_ids_size() > 0) {
      const auto now = Clock::now();
      if (sample_.tokens == 0) first_ = now;
      sample_.tokens += response_.token_ids_size();
      last_ = now;
      generated_.insert(generated_.end(), response_.token_ids().begin(),
                        response_.token_ids().end());
    }
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    const auto t1 = Clock::now();
    Level* level = level_;
    const int lane = lane_;
    {
      std::lock_guard<std::mutex> lock(level->mu);
      if (!status.ok()) {
        ++level->errors[std::to_string(static_cast<int>(status.error_code())) + " " +
                        status.error_message()];
      } else {
        sample_.e2e_s = std::chrono::duration<double>(t1 - t0_).count();
        if (sample_.tokens > 0)
          sample_.ttft_s = std::chrono::duration<double>(first_ - t0_).count();
        if (sample_.tokens > 1) {
          sample_.tpot_s =
              std::chrono::duration<double>(last_ - first_).count() / (sample_.tokens - 1);
        }
        level->samples.push_back(sample_);
      }
    }
    if (level->workload != nullptr && level->workload->turns > 0) {
      // The next turn resends this one and its answer; after T turns, a new conversation.
      Level::Conversation& c = level->conversations[static_cast<size_t>(lane)];
      c.history = prompt_;
      c.history.insert(c.history.end(), generated_.begin(), generated_.end());
      if (++c.turn >= level->workload->turns || !status.ok()) {
        c = Level::Conversation{{}, 0, c.number + 1};
      }
    }
    delete this;
    StartNext(level, lane);
  }

 private:
  Level* level_;
  int lane_;
  grpc::ClientContext context_;
  llm::v1::GenerateRequest request_;
  llm::v1::GenerateResponse response_;
  RequestSample sample_;
  Clock::time_point t0_{}, first_{}, last_{};
  std::vector<int32_t> prompt_, generated_;  // chat:T
};

void StartNext(Level* level, int lane) {
  const int i = level->next.fetch_add(1);
  if (i >= level->requests) {
    std::lock_guard<std::mutex> lock(level->mu);
    if (--level->active_lanes == 0) level->cv.notify_all();
    return;
  }
  (new BenchCall(level, lane, i))->Start();
}

// A level's report: its samples' throughput and latency percentiles, and its errors by message.
nlohmann::json Summarize(int concurrency, int requests, const std::vector<RequestSample>& samples,
                         const std::map<std::string, int>& errors, double wall) {
  std::vector<double> ttft, tpot, e2e;
  int64_t tokens = 0;
  for (const auto& s : samples) {
    if (s.ttft_s >= 0) ttft.push_back(s.ttft_s * 1e3);
    if (s.tpot_s >= 0) tpot.push_back(s.tpot_s * 1e3);
    e2e.push_back(s.e2e_s * 1e3);
    tokens += s.tokens;
  }
  int error_count = 0;
  nlohmann::json error_list = nlohmann::json::object();
  for (const auto& [what, n] : errors) {
    error_list[what] = n;
    error_count += n;
  }
  return {{"concurrency", concurrency},
          {"requests", requests},
          {"completed", samples.size()},
          {"errors", error_count},
          {"error_messages", error_list},
          {"wall_s", wall},
          {"output_tokens", tokens},
          {"output_tokens_per_s", tokens / wall},
          {"requests_per_s", samples.size() / wall},
          {"ttft_ms_p50", Percentile(ttft, 0.5)},
          {"ttft_ms_p99", Percentile(ttft, 0.99)},
          {"tpot_ms_p50", Percentile(tpot, 0.5)},
          {"tpot_ms_p99", Percentile(tpot, 0.99)},
          {"e2e_ms_p50", Percentile(e2e, 0.5)},
          {"e2e_ms_p99", Percentile(e2e, 0.99)}};
}

nlohmann::json RunLevel(const std::string& target, int concurrency, int requests, int channels,
                        const llm::v1::GenerateRequest& base, const Workload* workload) {
  Level level;
  level.requests = requests;
  level.base = base;
  level.workload = workload;
  level.conversations.resize(static_cast<size_t>(concurrency));
  // Lanes share `channels` connections round-robin (1: every stream multiplexed on one
  // connection, as a router does; = concurrency: independent clients).
  for (int k = 0; k < std::max(1, std::min(channels, concurrency)); ++k) {
    grpc::ChannelArguments args;
    args.SetInt("llm.bench.channel", k);  // distinct connections, not one shared subchannel
    level.stubs.push_back(llm::v1::Generation::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  level.active_lanes = concurrency;
  const auto start = Clock::now();
  for (int c = 0; c < concurrency; ++c) StartNext(&level, c);
  {
    std::unique_lock<std::mutex> lock(level.mu);
    level.cv.wait(lock, [&] { return level.active_lanes == 0; });
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  return Summarize(concurrency, requests, level.samples, level.errors, wall);
}

// ---- The OpenAI HTTP API ----

struct HttpLane {
  int fd = -1;
  std::string in;
  size_t head = std::string::npos;  // end of the response head, once read
  size_t at = 0;                    // next chunk-size line in `in`
  std::string body;                 // de-chunked, events not yet taken
  Clock::time_point t0, first, last;
  int content_events = 0;
  int tokens = -1;  // from the usage chunk
  int status = 0;
};

int ConnectTo(const std::string& target) {
  const size_t colon = target.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(target.c_str() + colon + 1)));
  std::string host = target.substr(0, colon);
  if (host.empty() || host == "localhost") host = "127.0.0.1";
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Takes the complete SSE events out of lane.body. True once the response ended ([DONE]).
bool TakeEvents(HttpLane& lane) {
  bool done = false;
  size_t start = 0;
  for (size_t end; (end = lane.body.find("\n\n", start)) != std::string::npos; start = end + 2) {
    const std::string_view ev(lane.body.data() + start, end - start);
    if (ev == "data: [DONE]") {
      done = true;
      continue;
    }
    if (ev.find("\"usage\":{") != std::string_view::npos) {
      const auto j = nlohmann::json::parse(ev.substr(6), nullptr, false);
      if (!j.is_discarded() && j["usage"].contains("completion_tokens")) {
        lane.tokens = j["usage"]["completion_tokens"].get<int>();
      }
    }
    const bool content = (ev.find("\"content\":\"") != std::string_view::npos &&
                          ev.find("\"content\":\"\"") == std::string_view::npos) ||
                         (ev.find("\"text\":\"") != std::string_view::npos &&
                          ev.find("\"text\":\"\"") == std::string_view::npos);
    if (content) {
      const auto now = Clock::now();
      if (lane.content_events++ == 0) lane.first = now;
      lane.last = now;
    }
  }
  lane.body.erase(0, start);
  return done;
}

// Parses what arrived. 1: the response is complete; 0: more to read; -1: an error.
int Advance(HttpLane& lane) {
  if (lane.head == std::string::npos) {
    lane.head = lane.in.find("\r\n\r\n");
    if (lane.head == std::string::npos) return 0;
    std::sscanf(lane.in.c_str(), "HTTP/1.1 %d", &lane.status);
    lane.at = lane.head + 4;
    if (lane.status != 200) return -1;
  }
  for (;;) {
    const size_t eol = lane.in.find("\r\n", lane.at);
    if (eol == std::string::npos) return 0;
    const size_t size = std::strtoul(lane.in.c_str() + lane.at, nullptr, 16);
    if (lane.in.size() < eol + 2 + size + 2) return 0;
    if (size == 0) {
      lane.in.erase(0, eol + 4);
      return 1;
    }
    lane.body.append(lane.in, eol + 2, size);
    lane.at = eol + 2 + size + 2;
    TakeEvents(lane);
  }
}

// A lane's response ended (`state` 1) or failed (-1): its sample, or its error (and then its
// connection is closed).
void EndResponse(HttpLane& l, int state, int ep, std::vector<RequestSample>& samples,
                 std::map<std::string, int>& errors) {
  if (state == 1 && l.tokens >= 0) {
    RequestSample s;
    s.e2e_s = std::chrono::duration<double>(Clock::now() - l.t0).count();
    s.tokens = l.tokens;
    if (l.content_events > 0) s.ttft_s = std::chrono::duration<double>(l.first - l.t0).count();
    if (l.tokens > 1 && l.content_events > 0) {
      s.tpot_s = std::chrono::duration<double>(l.last - l.first).count() / (l.tokens - 1);
    }
    samples.push_back(s);
  } else {
    ++errors[state == 1 ? "no usage chunk"
                        : absl::StrCat("HTTP ", l.status, " ",
                                       l.in.substr(0, std::min<size_t>(l.in.size(), 300)))];
    ::epoll_ctl(ep, EPOLL_CTL_DEL, l.fd, nullptr);
    ::close(l.fd);
    l.fd = -1;
  }
}

nlohmann::json RunOpenAiLevel(const std::string& target, int concurrency, int requests,
                              const std::string& path, const std::string& body) {
  const std::string request =
      absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n",
                   "Content-Length: ", body.size(), "\r\n\r\n", body);
  std::vector<RequestSample> samples;
  std::map<std::string, int> errors;
  std::vector<HttpLane> lanes(static_cast<size_t>(concurrency));
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  int started = 0, active = 0;
  const auto start_next = [&](size_t i) {
    HttpLane& l = lanes[i];
    if (started >= requests) {
      if (l.fd >= 0) ::close(l.fd);
      l.fd = -1;
      return;
    }
    if (l.fd < 0) {
      l.fd = ConnectTo(target);
      if (l.fd < 0) {
        ++errors["connect failed"];
        ++started;
        return;
      }
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.u64 = i;
      ::epoll_ctl(ep, EPOLL_CTL_ADD, l.fd, &e);
    }
    ++started;
    ++active;
    l.in.clear();
    l.body.clear();
    l.head = std::string::npos;
    l.content_events = 0;
    l.tokens = -1;
    l.t0 = Clock::now();
    (void)::send(l.fd, request.data(), request.size(), MSG_NOSIGNAL);
  };
  const auto t_start = Clock::now();
  for (size_t i = 0; i < lanes.size(); ++i) start_next(i);
  epoll_event events[256];
  char buf[65536];
  while (active > 0) {
    const int n = ::epoll_wait(ep, events, 256, 1000);
    for (int k = 0; k < n; ++k) {
      const size_t i = events[k].data.u64;
      HttpLane& l = lanes[i];
      const ssize_t got = ::read(l.fd, buf, sizeof(buf));
      int state = -1;
      if (got > 0) {
        l.in.append(buf, static_cast<size_t>(got));
        state = Advance(l);
      }
      if (state == 0) continue;
      --active;
      EndResponse(l, state, ep, samples, errors);
      start_next(i);
    }
  }
  ::close(ep);
  for (auto& l : lanes) {
    if (l.fd >= 0) ::close(l.fd);
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t_start).count();
  return Summarize(concurrency, requests, samples, errors, wall);
}

// The settings of one run, read from its flags once.
struct ServeBenchSettings {
  std::string target, api, prompt;
  std::string model;          // --api openai
  std::string workload_spec;  // --workload as given
  int64_t requests = 0, max_tokens = 0, channels = 0, rounds = 0;
  double temperature = 0;
  bool ignore_eos = false;
  bool chat = true;         // --endpoint chat, else completions
  std::vector<int> levels;  // --concurrency
  Workload workload;
};

void AddServeBenchFlags(FlagSet& flags) {
  flags
      .Value("target", "worker or router address, host:port (--api openai: the router's HTTP port)")
      .Value("api", "grpc (llm.v1.Generation) or openai (the router's HTTP API, streaming)", "grpc")
      .Value("endpoint", "with --api openai: chat or completions", "chat")
      .Value("model", "with --api openai: the model name (GET /v1/models lists them)", "")
      .Value("concurrency", "client streams at once; a comma list runs each in turn", "1")
      .Value("requests", "requests per concurrency level", "64")
      .Value("prompt", "prompt text", "Once upon a time")
      .Value("max-tokens", "tokens per request", "128")
      .Value("channels", "connections the client streams share (1: like a router)", "1")
      .Value("rounds",
             "times the whole list of concurrencies runs, interleaved; each level reports its "
             "median round (by throughput) and every round's throughput",
             "1")
      .Value("temperature", "sampling temperature (each request gets its own seed)", "0.8")
      .Bool("ignore-eos", "always generate max-tokens tokens")
      .Value("workload",
             "prefix:G:P: G groups of requests sharing a P-token prefix, each with 16 tokens of "
             "its own; chat:T: conversations of T turns, each resending the history (token "
             "ids; grpc only); empty: --prompt for every request",
             "");
}

// --concurrency: a comma list of positive integers.
absl::StatusOr<std::vector<int>> ParseLevels(const std::string& list) {
  std::vector<int> levels;
  for (const auto& part : absl::StrSplit(list, ',')) {
    int c = 0;
    if (!absl::SimpleAtoi(part, &c) || c < 1) {
      return absl::InvalidArgumentError("--concurrency: '" + std::string(part) +
                                        "' is not a positive integer");
    }
    levels.push_back(c);
  }
  return levels;
}

// --workload: empty, prefix:G:P (the G prefixes drawn here) or chat:T.
absl::StatusOr<Workload> ParseWorkload(const std::string& w) {
  Workload workload;
  if (w.empty()) return workload;
  int prefix_tokens = 0;
  const std::vector<std::string> parts = absl::StrSplit(w, ':');
  const bool chat = parts.size() == 2 && parts[0] == "chat" &&
                    absl::SimpleAtoi(parts[1], &workload.turns) && workload.turns >= 1;
  if (!chat &&
      (parts.size() != 3 || parts[0] != "prefix" || !absl::SimpleAtoi(parts[1], &workload.groups) ||
       !absl::SimpleAtoi(parts[2], &prefix_tokens) || workload.groups < 1 || prefix_tokens < 1)) {
    return absl::InvalidArgumentError("--workload: '" + w + "' is not prefix:G:P or chat:T");
  }
  uint64_t x = 12345;
  for (int g = 0; g < workload.groups; ++g) {
    std::vector<int32_t> p;
    for (int k = 0; k < prefix_tokens; ++k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      p.push_back(3 + static_cast<int32_t>((x >> 33) % 500));
    }
    workload.prefixes.push_back(std::move(p));
  }
  return workload;
}

absl::StatusOr<ServeBenchSettings> SettingsFromFlags(const FlagSet& flags) {
  if (absl::Status st = flags.Require({"target"}); !st.ok()) return st;
  ServeBenchSettings s;
  auto requests = flags.GetInt("requests");
  auto max_tokens = flags.GetInt("max-tokens");
  auto temperature = flags.GetDouble("temperature");
  auto channels = flags.GetInt("channels");
  if (!channels.ok()) return channels.status();
  for (const auto* v : {&requests, &max_tokens}) {
    if (!v->ok()) return v->status();
  }
  if (!temperature.ok()) return temperature.status();
  s.requests = *requests;
  s.max_tokens = *max_tokens;
  s.temperature = *temperature;
  s.channels = *channels;
  auto levels = ParseLevels(flags.GetString("concurrency"));
  if (!levels.ok()) return levels.status();
  s.levels = *std::move(levels);
  s.workload_spec = flags.GetString("workload");
  auto workload = ParseWorkload(s.workload_spec);
  if (!workload.ok()) return workload.status();
  s.workload = *std::move(workload);
  auto rounds = flags.GetInt("rounds");
  if (!rounds.ok() || *rounds < 1) {
    return rounds.ok() ? absl::InvalidArgumentError("--rounds: must be at least 1")
                       : rounds.status();
  }
  s.rounds = *rounds;
  s.api = flags.GetString("api");
  if (s.api != "grpc" && s.api != "openai") {
    return absl::InvalidArgumentError("--api: '" + s.api + "' is not grpc or openai");
  }
  s.chat = flags.GetString("endpoint") == "chat";
  if (!s.chat && flags.GetString("endpoint") != "completions") {
    return absl::InvalidArgumentError("--endpoint: chat or completions");
  }
  s.target = flags.GetString("target");
  s.prompt = flags.GetString("prompt");
  s.model = flags.GetString("model");
  s.ignore_eos = flags.GetBool("ignore-eos");
  return s;
}

// What every gRPC request starts from (the workload then sets its token ids).
llm::v1::GenerateRequest BaseRequest(const ServeBenchSettings& s) {
  llm::v1::GenerateRequest base;
  base.set_text(s.prompt);
  base.set_max_tokens(static_cast<uint32_t>(s.max_tokens));
  base.mutable_sampling()->set_temperature(static_cast<float>(s.temperature));
  base.set_ignore_eos(s.ignore_eos);
  return base;
}

// The body of every --api openai request: streamed, with the usage chunk that counts tokens.
std::string OpenAiBody(const ServeBenchSettings& s) {
  nlohmann::json http_body = {{"model", s.model},
                              {"max_tokens", s.max_tokens},
                              {"temperature", s.temperature},
                              {"ignore_eos", s.ignore_eos},
                              {"stream", true},
                              {"stream_options", {{"include_usage", true}}}};
  if (s.chat) {
    http_body["messages"] = {{{"role", "user"}, {"content", s.prompt}}};
  } else {
    http_body["prompt"] = s.prompt;
  }
  return http_body.dump();
}

// Every round of every level, by level. Rounds interleave the levels (1, 8, 32, 1, 8, 32, ...)
// so that a noisy neighbour slows every level alike rather than one of them.
std::vector<std::vector<nlohmann::json>> RunRounds(const ServeBenchSettings& s) {
  std::vector<std::vector<nlohmann::json>> by_level(s.levels.size());
  const llm::v1::GenerateRequest base = BaseRequest(s);
  const std::string http_body = OpenAiBody(s);
  const std::string path = s.chat ? "/v1/chat/completions" : "/v1/completions";
  for (int64_t r = 0; r < s.rounds; ++r) {
    for (size_t l = 0; l < s.levels.size(); ++l) {
      by_level[l].push_back(
          s.api == "openai"
              ? RunOpenAiLevel(s.target, s.levels[l], static_cast<int>(s.requests), path, http_body)
              : RunLevel(s.target, s.levels[l], static_cast<int>(s.requests),
                         static_cast<int>(s.channels), base, &s.workload));
    }
  }
  return by_level;
}

// Per level, its median round by throughput, with every round's throughput.
nlohmann::json MedianRounds(std::vector<std::vector<nlohmann::json>> by_level) {
  nlohmann::json results = nlohmann::json::array();
  for (auto& runs : by_level) {
    std::vector<double> rates;
    for (const auto& run : runs) rates.push_back(run["output_tokens_per_s"].get<double>());
    std::sort(runs.begin(), runs.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
      return a["output_tokens_per_s"].get<double>() < b["output_tokens_per_s"].get<double>();
    });
    nlohmann::json median = runs[runs.size() / 2];
    median["rounds_output_tokens_per_s"] = rates;
    results.push_back(median);
  }
  return results;
}

// The run's settings, its levels' results and, with several levels, each one's throughput
// against the first's.
nlohmann::json Report(const ServeBenchSettings& s, const nlohmann::json& results) {
  nlohmann::json out = {{"benchmark", "serve"},        {"api", s.api},
                        {"workload", s.workload_spec}, {"target", s.target},
                        {"prompt", s.prompt},          {"max_tokens", s.max_tokens},
                        {"ignore_eos", s.ignore_eos},  {"channels", s.channels},
                        {"rounds", s.rounds},          {"results", results}};
  if (results.size() > 1) {
    const double base_tps = results[0]["output_tokens_per_s"].get<double>();
    nlohmann::json ratios = nlohmann::json::object();
    for (const auto& r : results) {
      ratios["c" + std::to_string(r["concurrency"].get<int>())] =
          base_tps > 0 ? r["output_tokens_per_s"].get<double>() / base_tps : 0.0;
    }
    out["throughput_vs_first_level"] = ratios;
  }
  return out;
}

}  // namespace

int RunServeBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench serve";
  auto parsed = ParseSettings(cmd, args, AddServeBenchFlags, SettingsFromFlags);
  if (!parsed.settings) return parsed.exit_code;
  const ServeBenchSettings& s = *parsed.settings;
  const nlohmann::json results = MedianRounds(RunRounds(s));
  std::printf("%s\n", Report(s, results).dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
