// llm-cli: offline tools (generate, tokenize, detokenize, make-model, quantize, convert) and gRPC
// clients (call, load).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/version.h"
#include "tools/cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: llm-cli COMMAND [flags]\n"
    "  generate    --model DIR --prompt TEXT [--max-tokens N] [sampling flags] [--ids]\n"
    "  tokenize    --tokenizer DIR [--add-special]   (JSON lines {\"text\": ...} on stdin)\n"
    "  detokenize  --tokenizer DIR [--keep-special]  (JSON lines {\"ids\": [...]} on stdin)\n"
    "  chat-template --tokenizer DIR | --template FILE [--now YYYY-MM-DD]\n"
    "              (JSON lines {\"messages\": [...], ...} on stdin; {\"text\": ...} out)\n"
    "  masks       --tokenizer DIR --out DIR [--schemas FILE] [--regexes FILE] [--docs N]\n"
    "              (constraints' token masks along random walks, for a reference to check)\n"
    "  make-model  --shape NAME --out DIR [--seed S] [--dtype bf16|f16|f32]\n"
    "  quantize    --fp8 channel|tensor|block --model DIR|random:SHAPE --out DIR\n"
    "  convert     --gguf FILE --out DIR [--dtype bf16|f32]  (a GGUF file as a Hugging Face "
    "checkpoint)\n"
    "  call        --target HOST:PORT --prompt TEXT [--model NAME] [sampling flags]  (streams)\n"
    "  load        --target HOST:PORT [--count N]  (prints load reports as JSON lines)\n"
    "Run `llm-cli COMMAND --help` for a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("%s\n", llm::VersionLine("llm-cli").c_str());
    return 0;
  }
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "generate") return llm::cli::RunGenerate(args);
  if (command == "tokenize") return llm::cli::RunTokenize(args);
  if (command == "masks") return llm::cli::RunMasks(args);
  if (command == "detokenize") return llm::cli::RunDetokenize(args);
  if (command == "make-model") return llm::cli::RunMakeModel(args);
  if (command == "quantize") return llm::cli::RunQuantize(args);
  if (command == "convert") return llm::cli::RunConvert(args);
  if (command == "call") return llm::cli::RunCall(args);
  if (command == "load") return llm::cli::RunLoad(args);
  if (command == "chat-template") return llm::cli::RunChatTemplate(args);
  std::fprintf(stderr, "llm-cli: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}
