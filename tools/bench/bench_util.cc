#include "tools/bench/bench_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace llm::bench {

std::string SourcePath(const std::string& relative) {
  return (std::filesystem::path(LLM_SOURCE_DIR) / relative).string();
}

std::string SharedPath(const std::string& relative) {
  return (std::filesystem::path(LLM_SHARED_DIR) / relative).lexically_normal().string();
}

std::vector<int32_t> ParsePositiveInts(const std::string& list) {
  std::vector<int32_t> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int32_t v = 0;
    if (absl::SimpleAtoi(part, &v) && v > 0) out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::string> RunShell(const std::string& command) {
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("cannot run: " + command);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    return absl::InternalError(absl::StrCat("command failed (status ", status, "): ", command));
  }
  return out;
}

std::string SelfDir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

absl::StatusOr<int> FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return absl::InternalError("cannot find a free port");
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

namespace {

// utime + stime (clock ticks) and the parent pid of `pid`, from /proc/PID/stat; false if gone.
bool ReadStat(pid_t pid, double* ticks, pid_t* parent) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  // Fields after the command name: state is field 3, ppid 4; utime and stime are 14 and 15.
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 4) *parent = static_cast<pid_t>(std::stol(field));
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  *ticks = utime + stime;
  return true;
}

}  // namespace

double ProcessCpuSeconds(pid_t pid) {
  double total = 0, ticks = 0;
  pid_t parent = 0;
  if (!ReadStat(pid, &total, &parent)) return -1;
  // Live children too (nginx's workers under its master).
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t child = static_cast<pid_t>(std::stol(name));
    if (child != pid && ReadStat(child, &ticks, &parent) && parent == pid) total += ticks;
  }
  return total / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(const std::vector<std::string>& argv,
                                                              const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  auto p = std::unique_ptr<Subprocess>(new Subprocess());
  const int rc = posix_spawn(&p->pid_, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  return p;
}

bool Subprocess::running() {
  if (pid_ <= 0) return false;
  int status;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status;
    ::waitpid(pid_, &status, 0);
  }
}

}  // namespace llm::bench
