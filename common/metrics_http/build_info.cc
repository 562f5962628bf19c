#include "common/metrics_http/build_info.h"

#include <prometheus/gauge.h>

#include <string>

#include "common/version.h"

namespace llm {

void RegisterBuildInfo(prometheus::Registry& registry, const prometheus::Labels& labels) {
  prometheus::BuildGauge()
      .Name("llm_build_info")
      .Help("1, labelled with the build's version and git commit.")
      .Labels(labels)
      .Register(registry)
      .Add({{"version", std::string(Version())}, {"git_commit", std::string(GitCommit())}})
      .Set(1);
}

}  // namespace llm
