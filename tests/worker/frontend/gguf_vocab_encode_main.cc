// The C++ side of gguf_tokenizer_agreement.py: builds a Tokenizer from GGUF tokenizer metadata
// and answers JSON lines on stdin.
//
//   gguf_vocab_encode --gguf FILE.gguf    the file through Tokenizer::Load (what a worker does)
//   gguf_vocab_encode --vocab VOCAB.json [--source NAME] [--dump-dir DIR]
//                                         plain metadata (TokenizerFilesFromGguf + FromJson)
//
// VOCAB.json holds the GgufVocab fields by name (model, pre, tokens, token_types, scores,
// merges, bos_id, eos_id, unk_id, pad_id, add_bos, add_eos, add_space_prefix, chat_template;
// absent = not in the file). Requests: {"text": ..., "add_special": bool} answers {"ids": [...]},
// {"ids": [...], "skip_special": bool} answers {"text": ...}; a failure answers {"error": ...}.
// --dump-dir writes the tokenizer.json and tokenizer_config.json built.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "worker/frontend/gguf_tokenizer.h"
#include "worker/frontend/tokenizer.h"

namespace {

using llm::frontend::GgufVocab;
using nlohmann::json;

template <typename T>
void ReadOptional(const json& j, const char* key, std::optional<T>& out) {
  if (j.contains(key) && !j[key].is_null()) out = j[key].get<T>();
}

GgufVocab VocabFromJson(const json& j) {
  GgufVocab v;
  v.model = j.value("model", std::string());
  v.pre = j.value("pre", std::string());
  v.tokens = j.value("tokens", std::vector<std::string>());
  v.token_types = j.value("token_types", std::vector<int32_t>());
  v.scores = j.value("scores", std::vector<float>());
  v.merges = j.value("merges", std::vector<std::string>());
  ReadOptional(j, "bos_id", v.bos_id);
  ReadOptional(j, "eos_id", v.eos_id);
  ReadOptional(j, "unk_id", v.unk_id);
  ReadOptional(j, "pad_id", v.pad_id);
  ReadOptional(j, "add_bos", v.add_bos);
  ReadOptional(j, "add_eos", v.add_eos);
  ReadOptional(j, "add_space_prefix", v.add_space_prefix);
  v.chat_template = j.value("chat_template", std::string());
  return v;
}

json Answer(const llm::frontend::Tokenizer& tok, const json& req) {
  if (req.contains("text")) {
    auto ids = tok.Encode(req["text"].get<std::string>(), req.value("add_special", false));
    if (!ids.ok()) return {{"error", ids.status().ToString()}};
    return {{"ids", *ids}};
  }
  auto text = tok.Decode(req["ids"].get<std::vector<int32_t>>(), req.value("skip_special", true));
  if (!text.ok()) return {{"error", text.status().ToString()}};
  return {{"text", *text}};
}

int Serve(const llm::frontend::Tokenizer& tok) {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    const json req = json::parse(line, nullptr, false);
    const json out = req.is_object() ? Answer(tok, req) : json{{"error", "not a JSON object"}};
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  return 0;
}

int Run(const std::string& vocab_path, const std::string& source, const std::string& dump_dir) {
  std::ifstream in(vocab_path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const json j = json::parse(buffer.str(), nullptr, false);
  if (!in || j.is_discarded()) {
    std::cerr << vocab_path << ": cannot read a JSON object\n";
    return 1;
  }
  auto files = llm::frontend::TokenizerFilesFromGguf(VocabFromJson(j), source);
  if (!files.ok()) {
    std::cerr << files.status() << "\n";
    return 1;
  }
  const std::string tokenizer_json = files->tokenizer.dump();
  const std::string config_json = files->tokenizer_config.dump();
  if (!dump_dir.empty()) {
    std::ofstream(dump_dir + "/tokenizer.json") << tokenizer_json;
    std::ofstream(dump_dir + "/tokenizer_config.json") << config_json;
  }
  auto tok = llm::frontend::Tokenizer::FromJson(tokenizer_json, config_json, source);
  if (!tok.ok()) {
    std::cerr << tok.status() << "\n";
    return 1;
  }
  return Serve(**tok);
}

}  // namespace

int main(int argc, char** argv) {
  std::string vocab_path, source, dump_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--gguf") {
      auto tok = llm::frontend::Tokenizer::Load(argv[i + 1]);
      if (!tok.ok()) {
        std::cerr << tok.status() << "\n";
        return 1;
      }
      return Serve(**tok);
    } else if (flag == "--vocab") {
      vocab_path = argv[i + 1];
    } else if (flag == "--source") {
      source = argv[i + 1];
    } else if (flag == "--dump-dir") {
      dump_dir = argv[i + 1];
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (vocab_path.empty()) {
    std::cerr << "usage: gguf_vocab_encode --vocab VOCAB.json [--source NAME] [--dump-dir DIR]\n";
    return 2;
  }
  return Run(vocab_path, source.empty() ? vocab_path : source, dump_dir);
}
