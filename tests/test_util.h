// Helpers shared by the tests: where the shared test data and the built binaries are.
#ifndef LLM_TESTS_TEST_UTIL_H_
#define LLM_TESTS_TEST_UTIL_H_

#include <string>

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

struct CommandResult {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs `argv` with `stdin_text` on its standard input and waits for it.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& stdin_text = "");

}  // namespace llm::testing

#define LLM_REQUIRE_SHARED(relative) ASSERT_TRUE(::llm::testing::SharedExists(relative))

#endif  // LLM_TESTS_TEST_UTIL_H_
