// The llm_build_info gauge both processes export: 1, labelled with the build's version and git
// commit (common/version.h), as `--version` prints them.
#ifndef LLM_COMMON_METRICS_HTTP_BUILD_INFO_H_
#define LLM_COMMON_METRICS_HTTP_BUILD_INFO_H_

#include <prometheus/labels.h>
#include <prometheus/registry.h>

namespace llm {

// Registers llm_build_info in `registry`, with `labels` (e.g. the worker's model_name) too.
void RegisterBuildInfo(prometheus::Registry& registry, const prometheus::Labels& labels = {});

}  // namespace llm

#endif  // LLM_COMMON_METRICS_HTTP_BUILD_INFO_H_
