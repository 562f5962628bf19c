#include "router/openai/logprob_json.h"

#include <cmath>
#include <string>

namespace llm::router::openai {

using json = nlohmann::ordered_json;

float JsonLogprob(float logprob) {
  constexpr float kUnlikelyLogprob = -9999.0f;
  return std::isfinite(logprob) ? logprob : kUnlikelyLogprob;
}

json TokenBytes(const llm::v1::TokenLogprob& t) {
  const std::string& s = t.bytes().empty() ? t.text() : t.bytes();
  json b = json::array();
  for (const unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json LogprobEntries(const llm::v1::GenerateResponse& m, int top) {
  json content = json::array();
  for (const auto& lp : m.logprobs()) {
    json alternatives = json::array();
    for (int i = 0; i < lp.top_size() && i < top; ++i) {
      alternatives.push_back({{"token", lp.top(i).text()},
                              {"logprob", JsonLogprob(lp.top(i).logprob())},
                              {"bytes", TokenBytes(lp.top(i))}});
    }
    content.push_back({{"token", lp.sampled().text()},
                       {"logprob", JsonLogprob(lp.sampled().logprob())},
                       {"bytes", TokenBytes(lp.sampled())},
                       {"top_logprobs", std::move(alternatives)}});
  }
  return content;
}

}  // namespace llm::router::openai
