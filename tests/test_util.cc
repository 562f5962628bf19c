#include "tests/test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace llm::testing {

int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

namespace {

// A sample line's or a series' name and labels ("name{a=\"x\",b=\"y\"}" -> name, {a=x, b=y}).
// Label values hold no '"' or ',' here (our metrics' values are names and numbers).
std::pair<std::string, std::map<std::string, std::string>> SplitSeries(const std::string& s) {
  const size_t brace = s.find('{');
  std::map<std::string, std::string> labels;
  if (brace == std::string::npos) return {s, labels};
  const size_t end = s.rfind('}');
  std::stringstream in(s.substr(brace + 1, end - brace - 1));
  for (std::string item; std::getline(in, item, ',');) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    std::string value = item.substr(eq + 1);
    if (value.size() >= 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
    labels[item.substr(0, eq)] = value;
  }
  return {s.substr(0, brace), labels};
}

}  // namespace

double MetricValue(const std::string& page, const std::string& series) {
  const auto [name, want] = SplitSeries(series);
  std::stringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    const auto [line_name, have] = SplitSeries(line.substr(0, space));
    if (line_name != name) continue;
    bool match = true;
    for (const auto& [k, v] : want) {
      const auto it = have.find(k);
      if (it == have.end() || it->second != v) match = false;
    }
    if (match) return std::atof(line.c_str() + space + 1);
  }
  return -1;
}

namespace fs = std::filesystem;

std::string SharedPath(const std::string& relative) {
  // NOTE: the environment may move it (a test bundle run on another machine,
  // scripts/gpu_bundle.sh).
  const char* env = std::getenv("LLM_SHARED_DIR");
  const fs::path root = env != nullptr && *env != '\0' ? fs::path(env) : fs::path(LLM_SHARED_DIR);
  return (root / relative).lexically_normal().string();
}

::testing::AssertionResult SharedExists(const std::string& relative) {
  const std::string p = SharedPath(relative);
  if (fs::exists(p)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "required test data missing: " << p
         << " (the tests need the shared folder ../shared beside the checkout; set "
            "-DLLM_SHARED_DIR or the environment's LLM_SHARED_DIR to point elsewhere)";
}

std::string BinPath(const std::string& name) { return (fs::path(LLM_BIN_DIR) / name).string(); }

std::string SourcePath(const std::string& relative) {
  return (fs::path(LLM_SOURCE_DIR) / relative).string();
}

std::string MakeTempDir(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) /
                 (std::string(info ? info->test_suite_name() : "t") + "." +
                  (info ? info->name() : "t") + "." + name + "." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& stdin_text) {
  const std::string dir = MakeTempDir("cmd");
  const std::string in = dir + "/stdin", out = dir + "/stdout", err = dir + "/stderr";
  std::ofstream(in, std::ios::binary) << stdin_text;
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fin = ::open(in.c_str(), O_RDONLY);
    const int fout = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int ferr = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fin, 0);
    ::dup2(fout, 1);
    ::dup2(ferr, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  CommandResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(out),
                  slurp(err)};
  fs::remove_all(dir);
  return r;
}

std::unique_ptr<ChildProcess> ChildProcess::Start(const std::vector<std::string>& argv) {
  auto child = std::unique_ptr<ChildProcess>(new ChildProcess());
  // A directory per child: a second child of the same test once took (removed and replaced)
  // the first one's log, so the first one's later output was lost.
  static std::atomic<int> next_child{0};
  child->log_ = MakeTempDir("child" + std::to_string(next_child++)) + "/output.log";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(child->log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null_in = ::open("/dev/null", O_RDONLY);
    ::dup2(null_in, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    // The child starts with the shutdown signals at their defaults, whatever the test runner
    // ignores (a background or nohup'd ctest ignores SIGINT or SIGHUP, and the servers leave
    // an ignored signal ignored): the lifecycle tests send them.
    for (const int sig : {SIGTERM, SIGINT, SIGHUP}) std::signal(sig, SIG_DFL);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  child->pid_ = pid;
  return child;
}

ChildProcess::~ChildProcess() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

std::string ChildProcess::Output() const {
  std::ifstream f(log_, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string ChildProcess::WaitForLine(const std::string& text, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto find = [&](const std::string& out) -> std::string {
    const size_t pos = out.find(text);
    if (pos == std::string::npos) return "";
    const size_t begin = out.rfind('\n', pos);
    const size_t end = out.find('\n', pos);
    return out.substr(begin == std::string::npos ? 0 : begin + 1,
                      end == std::string::npos
                          ? std::string::npos
                          : end - (begin == std::string::npos ? 0 : begin + 1));
  };
  for (;;) {
    // Whether it still runs is read before the output, so a line printed just before the
    // process exits (or just before the deadline) is still found by this last read.
    const bool last = !running() || std::chrono::steady_clock::now() >= deadline;
    std::string line = find(Output());
    if (!line.empty() || last) return line;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ChildProcess::Signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

bool ChildProcess::running() {
  if (status_ >= 0) return false;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return false;
  }
  return r == 0;
}

int ChildProcess::WaitExit(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

long ChildProcess::RssKb() const {
  std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

}  // namespace llm::testing
