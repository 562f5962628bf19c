// Helpers shared by the tests: where the shared test data and the built binaries are.
#ifndef LLM_TESTS_TEST_UTIL_H_
#define LLM_TESTS_TEST_UTIL_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llm::testing {

// Absolute path of `relative` under ../shared (models/, tokenizers/, golden/).
std::string SharedPath(const std::string& relative);
// Succeeds when the shared path exists; the failure says the shared folder is required.
::testing::AssertionResult SharedExists(const std::string& relative);
// Path of a built executable (build/bin/NAME).
std::string BinPath(const std::string& name);
// Path under the source tree.
std::string SourcePath(const std::string& relative);
// A fresh empty directory under the test's temporary directory.
std::string MakeTempDir(const std::string& name);

// A blocking TCP connection to 127.0.0.1:port (the caller closes it), or -1.
int ConnectLoopback(int port);
// A loopback port that was free a moment ago (for programs that cannot be given port 0).
int FreeLoopbackPort();

// Polls `done` every few milliseconds until it holds (true) or `timeout` passes (false): how a
// test waits on state it can only observe from outside.
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout);

// The value of `series` in a Prometheus text page: "name" or "name{a=\"x\",...}", matching the
// first sample of that name whose labels include the given ones (others, such as model_name,
// may be there too). -1 when none does.
double MetricValue(const std::string& page, const std::string& series);

struct CommandResult {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs `argv` with `stdin_text` on its standard input and waits for it.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& stdin_text = "");

// A child process whose standard output and error go to a file the test can read. Killed (SIGKILL)
// on destruction if still running.
class ChildProcess {
 public:
  static std::unique_ptr<ChildProcess> Start(const std::vector<std::string>& argv);
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Waits until the output contains `text`; returns the whole line holding it, or "" on
  // timeout or exit.
  std::string WaitForLine(const std::string& text, int timeout_ms);
  std::string Output() const;
  void Signal(int sig);
  // The exit code (128 + signal for a signal), or -1 when still running after `timeout_ms`.
  int WaitExit(int timeout_ms);
  bool running();
  // Resident set size in KiB (0 when unknown).
  long RssKb() const;

 private:
  pid_t pid_ = -1;
  std::string log_;
  int status_ = -1;
};

}  // namespace llm::testing

#define LLM_REQUIRE_SHARED(relative) ASSERT_TRUE(::llm::testing::SharedExists(relative))

#endif  // LLM_TESTS_TEST_UTIL_H_
