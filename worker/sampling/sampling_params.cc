#include "worker/sampling/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace llm::sampling {
namespace {

// Integers are quoted as integers (a float format would print 4294967295 as 4.29497e+09).
absl::Status IntRange(const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("sampling.", field, ": ", v, " is outside [", lo, ", ", hi, "]"));
}

absl::Status Range(const char* field, double v, double lo, bool lo_open, double hi) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("sampling.", field, ": ", v, " is outside ",
                                                 lo_open ? "(" : "[", lo, ", ", hi, "]"));
}

}  // namespace

absl::Status SamplingParams::Validate(int32_t vocab_size) const {
  for (const absl::Status& st : {
           Range("temperature", temperature, 0, false, 100),
           IntRange("top_k", top_k, 0, vocab_size),
           Range("top_p", top_p, 0, true, 1),
           Range("min_p", min_p, 0, false, 1),
           Range("repetition_penalty", repetition_penalty, 0, true, 10),
           Range("presence_penalty", presence_penalty, -2, false, 2),
           Range("frequency_penalty", frequency_penalty, -2, false, 2),
       }) {
    if (!st.ok()) return st;
  }
  if (logit_bias.size() > kMaxLogitBias) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.logit_bias: ", logit_bias.size(),
                                                   " entries; at most ", kMaxLogitBias));
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.logit_bias: token id ", id,
                                                     " is outside the vocabulary [0, ", vocab_size,
                                                     ")"));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.logit_bias[", id, "]: ", bias, " is outside [-100, 100]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace llm::sampling
