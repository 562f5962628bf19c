// llm-cli masks: the token masks of constraints along random documents, for a comparison with
// a reference implementation (tests/worker/constraint/mask_agreement.py compares them with
// llguidance's).
//
// For each constraint (--schemas, a JSON array of JSON Schemas; --regexes, a JSON array of
// patterns; and json_object), --docs random walks of up to --max-tokens tokens: each step
// takes a uniformly random token among those the mask allows (EOS where the output is complete;
// the walk ends there, EOS not written). Writes <out>/<name>.bin: the vocabulary's size (a
// little-endian u32), then per walk a little-endian u32 token count n, the n token ids (i32), then
// n + 1 masks (before each token, and after the last), each ceil(vocab / 32) little-endian u32
// words, bit t % 32 of word t / 32 set when token t may come next.
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "nlohmann/json.hpp"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"
#include "worker/constraint/constraint.h"
#include "worker/frontend/tokenizer.h"
#include "worker/loop/constraint_compiler.h"

namespace llm::cli {

using tools::Fail;
using tools::ParseOrExit;
namespace {

struct WalkSettings {
  int64_t docs = 200;
  int64_t max_tokens = 48;
  int32_t eos = -1;
};

// The mask at `pos` as bytes (LSB-first bits), EOS set where the output is complete.
std::string MaskBytes(const constraint::CompiledConstraint& c, const constraint::Position& pos,
                      int32_t eos) {
  const int32_t vocab = c.tokens().vocab_size();
  constraint::TokenMask mask = *c.MaskAt(pos);
  if (eos >= 0 && c.Accepting(pos)) mask[eos / 64] |= uint64_t{1} << (eos % 64);
  std::string bytes(reinterpret_cast<const char*>(mask.data()), mask.size() * 8);
  bytes.resize(static_cast<size_t>((vocab + 31) / 32) * 4);
  return bytes;
}

void WriteWalks(const constraint::CompiledConstraint& c, const WalkSettings& w, std::mt19937& rng,
                std::ofstream& out) {
  const int32_t vocab = c.tokens().vocab_size();
  const uint32_t header = static_cast<uint32_t>(vocab);
  out.write(reinterpret_cast<const char*>(&header), 4);
  for (int64_t d = 0; d < w.docs; ++d) {
    std::vector<int32_t> tokens;
    std::string masks;
    constraint::Position pos = c.Start();
    while (true) {
      const std::string mask = MaskBytes(c, pos, w.eos);
      masks += mask;
      if (static_cast<int64_t>(tokens.size()) >= w.max_tokens) break;
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab; ++t) {
        if ((static_cast<uint8_t>(mask[static_cast<size_t>(t / 8)]) >> (t % 8)) & 1) {
          allowed.push_back(t);
        }
      }
      if (allowed.empty()) break;
      const int32_t next = allowed[rng() % allowed.size()];
      if (next == w.eos) break;  // the walk ends complete
      tokens.push_back(next);
      c.Walk(pos, c.tokens().bytes(next));
    }
    const uint32_t n = static_cast<uint32_t>(tokens.size());
    out.write(reinterpret_cast<const char*>(&n), 4);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(n * 4));
    out.write(masks.data(), static_cast<std::streamsize>(masks.size()));
  }
}

absl::StatusOr<nlohmann::ordered_json> ReadArray(const std::string& path) {
  if (path.empty()) return nlohmann::ordered_json::array();
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(path + ": cannot open");
  auto j = nlohmann::ordered_json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError(path + ": not a JSON array");
  }
  return j;
}

}  // namespace

int RunMasks(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli masks";
  FlagSet flags;
  flags.Value("tokenizer", "directory holding tokenizer.json, or the file")
      .Value("schemas", "JSON file: an array of JSON Schemas", "")
      .Value("regexes", "JSON file: an array of regular expressions", "")
      .Value("docs", "random walks per constraint", "200")
      .Value("max-tokens", "tokens per walk at most", "48")
      .Value("seed", "seed of the walks", "1")
      .Value("out", "directory to write <name>.bin into");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  if (absl::Status st = flags.Require({"tokenizer", "out"}); !st.ok()) return Fail(cmd, st);
  auto tok = frontend::Tokenizer::Load(flags.GetString("tokenizer"));
  if (!tok.ok()) return Fail(cmd, tok.status());
  auto schemas = ReadArray(flags.GetString("schemas"));
  if (!schemas.ok()) return Fail(cmd, schemas.status());
  auto regexes = ReadArray(flags.GetString("regexes"));
  if (!regexes.ok()) return Fail(cmd, regexes.status());
  WalkSettings w;
  auto docs = flags.GetInt("docs"), max_tokens = flags.GetInt("max-tokens"),
       seed = flags.GetInt("seed");
  if (!docs.ok() || !max_tokens.ok() || !seed.ok()) {
    return Fail(cmd, absl::InvalidArgumentError("--docs, --max-tokens, --seed: integers"));
  }
  w.docs = *docs;
  w.max_tokens = *max_tokens;
  w.eos = (*tok)->eos_id().value_or(-1);
  std::vector<std::pair<std::string, constraint::ConstraintSpec>> specs;
  for (size_t i = 0; i < schemas->size(); ++i) {
    specs.push_back(
        {"schema" + std::to_string(i), {constraint::Kind::kJsonSchema, (*schemas)[i].dump(), {}}});
  }
  for (size_t i = 0; i < regexes->size(); ++i) {
    specs.push_back({"regex" + std::to_string(i),
                     {constraint::Kind::kRegex, (*regexes)[i].get<std::string>(), {}}});
  }
  specs.push_back({"json_object", {constraint::Kind::kJsonObject, "", {}}});
  loop::ConstraintCompiler compiler(**tok);
  std::mt19937 rng(static_cast<uint32_t>(*seed));
  for (const auto& [name, spec] : specs) {
    auto compiled = compiler.Compile(spec);
    if (!compiled.ok()) return Fail(cmd, compiled.status());
    std::ofstream out(flags.GetString("out") + "/" + name + ".bin", std::ios::binary);
    if (!out) return Fail(cmd, absl::NotFoundError(flags.GetString("out") + ": cannot write"));
    WriteWalks(**compiled, w, rng, out);
  }
  return 0;
}

}  // namespace llm::cli
