#include "worker/engine/speculation.h"

#include "absl/strings/str_cat.h"

namespace llm::engine {

absl::StatusOr<SpeculativeMethod> ParseSpeculativeMethod(std::string_view name) {
  if (name == "off") return SpeculativeMethod::kOff;
  if (name == "ngram") return SpeculativeMethod::kNgram;
  if (name == "draft") return SpeculativeMethod::kDraft;
  if (name == "oracle") return SpeculativeMethod::kOracle;
  return absl::InvalidArgumentError(absl::StrCat("engine.speculative.method: '", std::string(name),
                                                 "' is not one of off, ngram, draft (oracle: "
                                                 "llm-bench only)"));
}

std::string_view SpeculativeMethodName(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kNgram:
      return "ngram";
    case SpeculativeMethod::kDraft:
      return "draft";
    case SpeculativeMethod::kOracle:
      return "oracle";
    case SpeculativeMethod::kOff:
      break;
  }
  return "off";
}

absl::Status SpeculativeConfig::Validate() const {
  if (!enabled()) return absl::OkStatus();
  if (num_tokens < 1 || num_tokens > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.speculative.num_tokens: must be in [1, 16], got ", num_tokens));
  }
  if (method == SpeculativeMethod::kNgram) {
    if (ngram_min < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine.speculative.ngram_min: must be >= 1, got ", ngram_min));
    }
    if (ngram_max < ngram_min || ngram_max > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine.speculative.ngram_max: must be in [ngram_min (", ngram_min,
                       "), 64], got ", ngram_max));
    }
  }
  if (method == SpeculativeMethod::kDraft && draft_model.empty()) {
    return absl::InvalidArgumentError(
        "engine.speculative.draft_model.path: required with engine.speculative.method: draft");
  }
  return absl::OkStatus();
}

}  // namespace llm::engine
