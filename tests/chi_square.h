// Chi-square checks for tests that compare draws with a distribution or with other draws.
#ifndef LLM_TESTS_CHI_SQUARE_H_
#define LLM_TESTS_CHI_SQUARE_H_

#include <cstdint>
#include <map>
#include <string>

namespace llm::testing {

// The chi-square distribution's 0.999 quantile (p = 0.001) for 1..7 degrees of freedom.
inline double ChiSquareCritical(int degrees) {
  static const double kQuantiles[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322};
  return kQuantiles[degrees - 1];
}

// The two-sample chi-square statistic of two equally large samples' counts per outcome,
// sum (a - b)^2 / (a + b), and in `categories` the outcomes either sample holds.
inline double TwoSampleChiSquare(const std::map<std::string, int64_t>& a,
                                 const std::map<std::string, int64_t>& b, int* categories) {
  std::map<std::string, std::pair<int64_t, int64_t>> both;
  for (const auto& [k, n] : a) both[k].first = n;
  for (const auto& [k, n] : b) both[k].second = n;
  double chi = 0.0;
  for (const auto& [k, ab] : both) {
    const double d = static_cast<double>(ab.first - ab.second);
    chi += d * d / static_cast<double>(ab.first + ab.second);
  }
  *categories = static_cast<int>(both.size());
  return chi;
}

}  // namespace llm::testing

#endif  // LLM_TESTS_CHI_SQUARE_H_
