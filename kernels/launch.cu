#include <atomic>

#include "kernels/launch.h"

namespace llm::kernels {
namespace {

std::atomic<bool> programmatic_launch{false};

}  // namespace

void SetProgrammaticLaunch(bool on) { programmatic_launch.store(on); }

bool ProgrammaticLaunch() { return programmatic_launch.load(std::memory_order_relaxed); }

}  // namespace llm::kernels
