#include "worker/loop/engine_loop.h"

#include <algorithm>

#include "common/thread_name.h"

namespace llm::loop {

namespace {
constexpr double kEwmaAlpha = 0.1;
// Steps with fewer prompt tokens say little about a prompt token's cost (a decode step's time is
// mostly reading the weights).
constexpr int32_t kPrefillSampleTokens = 32;
constexpr std::chrono::milliseconds kBusyWindow{1000};
}  // namespace

EngineLoop::EngineLoop(const engine::SchedulerConfig& config,
                       std::unique_ptr<runner::ModelRunner> runner, EngineEvents* events,
                       StepObserver* observer)
    : scheduler_(config), runner_(std::move(runner)), events_(events), observer_(observer) {
  stats_.scheduler = scheduler_.stats();
}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() {
  window_start_ = Clock::now();
  thread_ = std::thread([this] {
    SetCurrentThreadName("engine");
    Run();
  });
}

void EngineLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(intake_mu_);
    stop_ = true;
  }
  intake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::Submit(engine::RequestPtr request) {
  {
    std::lock_guard<std::mutex> lock(intake_mu_);
    new_requests_.push_back(std::move(request));
  }
  intake_cv_.notify_one();
}

void EngineLoop::Abort(uint64_t key) {
  {
    std::lock_guard<std::mutex> lock(intake_mu_);
    aborts_.push_back(key);
  }
  intake_cv_.notify_one();
}

EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

Clock::duration EngineLoop::IterationAge(Clock::time_point now) const {
  const int64_t start = iteration_start_.load(std::memory_order_relaxed);
  if (start == 0) return Clock::duration::zero();
  return std::max(Clock::duration::zero(), now - Clock::time_point(Clock::duration(start)));
}

void EngineLoop::Touch() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.version;
  stats_cv_.notify_all();
}

uint64_t EngineLoop::WaitForChange(uint64_t version, Clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(stats_mu_);
  stats_cv_.wait_until(lock, deadline, [&] { return stats_.version != version; });
  return stats_.version;
}

void EngineLoop::DrainIntake() {
  std::vector<engine::RequestPtr> requests;
  std::vector<uint64_t> aborts;
  {
    std::lock_guard<std::mutex> lock(intake_mu_);
    requests.swap(new_requests_);
    aborts.swap(aborts_);
  }
  for (auto& r : requests) scheduler_.Add(std::move(r));
  for (uint64_t key : aborts) {
    if (scheduler_.Abort(key)) ++aborted_;
  }
}

void EngineLoop::PublishStats() {
  EngineStats s;
  s.scheduler = scheduler_.stats();
  s.step_time_ewma_ms = ewma_ms_;
  s.prefill_ms_per_token = prefill_ms_per_token_;
  s.busy_ratio = busy_ratio_;
  s.steps = steps_;
  s.aborted = aborted_;
  s.spec_drafts = spec_drafts_;
  s.spec_draft_tokens = spec_draft_tokens_;
  s.spec_accepted_tokens = spec_accepted_tokens_;
  std::lock_guard<std::mutex> lock(stats_mu_);
  const auto& a = s.scheduler;
  const auto& b = stats_.scheduler;
  const bool changed =
      a.queued_requests != b.queued_requests || a.queued_prompt_tokens != b.queued_prompt_tokens ||
      a.running_requests != b.running_requests || a.free_slots != b.free_slots ||
      a.kv_blocks_used != b.kv_blocks_used || a.kv_blocks_cached != b.kv_blocks_cached ||
      a.preemptions != b.preemptions || a.preempted_requests != b.preempted_requests ||
      s.busy_ratio != stats_.busy_ratio || s.aborted != stats_.aborted;
  s.version = stats_.version + (changed ? 1 : 0);
  stats_ = s;
  if (changed) stats_cv_.notify_all();
}

void EngineLoop::FailAll(const absl::Status& status) {
  DrainIntake();
  events_->OnFailed(scheduler_.AbortAll(), status);
}

void EngineLoop::RollBusyWindow(Clock::time_point now) {
  if (now - window_start_ < kBusyWindow) return;
  busy_ratio_ =
      std::min(1.0, window_busy_s_ / std::chrono::duration<double>(now - window_start_).count());
  window_busy_s_ = 0;
  window_start_ = now;
}

void EngineLoop::CollectOne() {
  auto result = runner_->Collect();
  const Launched launched = launched_.empty() ? Launched{0, 0} : launched_.front();
  if (!launched_.empty()) launched_.pop_front();
  const Clock::time_point now = Clock::now();
  if (!result.ok()) {
    FailAll(result.status());
    return;
  }
  ++steps_;
  const double step_s = result->device_seconds;
  ewma_ms_ = steps_ == 1 ? step_s * 1e3 : (1 - kEwmaAlpha) * ewma_ms_ + kEwmaAlpha * step_s * 1e3;
  if (launched.prompt_tokens >= kPrefillSampleTokens) {
    const double per_token_ms = step_s * 1e3 / launched.tokens;
    prefill_ms_per_token_ =
        prefill_ms_per_token_ == 0.0
            ? per_token_ms
            : (1 - kEwmaAlpha) * prefill_ms_per_token_ + kEwmaAlpha * per_token_ms;
  }
  window_busy_s_ += step_s;
  RollBusyWindow(now);
  const double gap = result->gap_seconds;
  int32_t decodes = 0;
  for (const auto& o : result->outputs)
    decodes += o.finish == sampling::FinishReason::kNone ? 1 : 0;
  if (observer_ != nullptr) {
    observer_->OnStep(step_s, gap, static_cast<int32_t>(result->outputs.size()), decodes,
                      launched.prompt_tokens);
  }
  for (const auto& o : result->outputs) {
    if (o.draft_tokens <= 0) continue;
    ++spec_drafts_;
    spec_draft_tokens_ += static_cast<uint64_t>(o.draft_tokens);
    spec_accepted_tokens_ += static_cast<uint64_t>(o.accepted_tokens);
    if (observer_ != nullptr) observer_->OnVerified(o.draft_tokens, o.accepted_tokens);
  }
  events_scratch_.clear();
  scheduler_.Update(*result, events_scratch_);
  if (!events_scratch_.empty()) events_->OnTokens(events_scratch_, now);
}

void EngineLoop::Run() {
  // The scheduler's state changes only through the intake or collected results, so after an
  // empty plan with nothing in flight there is nothing to do until the intake brings more.
  bool may_have_work = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(intake_mu_);
      iteration_start_.store(0, std::memory_order_relaxed);
      // While idle, wake once per busy window so the reported busy ratio falls to what it is
      // (otherwise an idle worker would go on reporting its last busy window).
      const bool woken = intake_cv_.wait_until(lock, window_start_ + kBusyWindow, [&] {
        return stop_ || !new_requests_.empty() || !aborts_.empty() || may_have_work ||
               runner_->in_flight() > 0;
      });
      if (stop_) break;
      if (!woken) {
        lock.unlock();
        RollBusyWindow(Clock::now());
        PublishStats();
        continue;
      }
    }
    iteration_start_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    DrainIntake();
    engine::StepPlan plan = scheduler_.Schedule();
    may_have_work = !plan.empty();
    if (!plan.admissions.empty()) {
      admitted_scratch_.clear();
      // A readmission after a preemption is not a new admission (its queue time was counted).
      for (const auto& a : plan.admissions) {
        if (!a.readmission) admitted_scratch_.push_back(a.request->key);
      }
      if (!admitted_scratch_.empty()) events_->OnAdmitted(admitted_scratch_, Clock::now());
    }
    if (plan.empty()) {
      // Nothing to compute (the scheduler keeps any releases for the next plan).
      if (runner_->in_flight() > 0) {
        CollectOne();
        may_have_work = true;  // results may have ended requests, to retire next iteration
      }
    } else {
      int32_t prompt_tokens = 0;
      for (const auto& p : plan.prefills) prompt_tokens += p.num_tokens;
      const Launched launched{plan.num_tokens(), prompt_tokens};
      if (absl::Status st = runner_->Launch(std::move(plan)); !st.ok()) {
        FailAll(st);
      } else {
        launched_.push_back(launched);
        if (runner_->in_flight() >= runner::ModelRunner::kMaxInFlight) CollectOne();
      }
    }
    PublishStats();
  }
  while (runner_->in_flight() > 0) (void)runner_->Collect();
}

}  // namespace llm::loop
