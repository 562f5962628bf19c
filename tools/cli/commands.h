// llm-cli subcommands. Each takes the arguments after its name and returns the exit code.
#ifndef LLM_TOOLS_CLI_COMMANDS_H_
#define LLM_TOOLS_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace llm::cli {

int RunGenerate(const std::vector<std::string>& args);
int RunTokenize(const std::vector<std::string>& args);
int RunDetokenize(const std::vector<std::string>& args);
int RunMakeModel(const std::vector<std::string>& args);
int RunQuantize(const std::vector<std::string>& args);
int RunConvert(const std::vector<std::string>& args);
int RunCall(const std::vector<std::string>& args);
int RunLoad(const std::vector<std::string>& args);
int RunChatTemplate(const std::vector<std::string>& args);
int RunMasks(const std::vector<std::string>& args);

}  // namespace llm::cli

#endif  // LLM_TOOLS_CLI_COMMANDS_H_
