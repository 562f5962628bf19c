#include "tools/fake_worker/fake_worker.h"

#include <condition_variable>
#include <thread>

#include "llm/v1/generation.grpc.pb.h"
#include "llm/v1/worker_load.grpc.pb.h"

namespace llm::tools {

struct FakeWorker::State {
  FakeWorker* worker;
  mutable std::mutex mu;
  std::condition_variable cv;
  FakeBehaviour behaviour;
  llm::v1::LoadReport load;
  uint64_t load_version = 0;
  bool shutdown = false;
};

namespace {

grpc::ByteBuffer Serialize(const google::protobuf::Message& m) {
  const std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

class FakeStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  FakeStream(FakeWorker::State* state, grpc::CallbackServerContext* context,
             FakeWorker::Counters* counters)
      : counters_(counters) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      b_ = state->behaviour;
    }
    llm::v1::GenerateResponse r;
    r.set_text(std::string(b_.text_bytes, 'x'));
    r.add_token_ids(1);
    message_ = Serialize(r);
    r.set_finish_reason(llm::v1::FINISH_REASON_LENGTH);
    r.mutable_usage()->set_prompt_tokens(3);
    r.mutable_usage()->set_completion_tokens(static_cast<uint32_t>(b_.messages));
    last_ = Serialize(r);
    ++counters_->open;
    if (b_.fail_code != grpc::StatusCode::OK) {
      for (const auto& [key, value] : b_.fail_trailers) context->AddTrailingMetadata(key, value);
    }
    std::lock_guard<std::mutex> lock(mu_);
    NextLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    ++counters_->written;
    NextLocked();
  }

  void OnCancel() override {
    ++counters_->cancelled;
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_flag_ = true;
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    --counters_->open;
    delete this;
  }

 private:
  void NextLocked() {
    if (finished_ || cancelled_flag_) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      return;
    }
    if (sent_ < b_.messages) {
      if (b_.per_message_delay.count() > 0) std::this_thread::sleep_for(b_.per_message_delay);
      const bool last = sent_ + 1 == b_.messages && b_.fail_code == grpc::StatusCode::OK;
      ++sent_;
      writing_ = true;
      StartWrite(last ? &last_ : &message_);
      return;
    }
    if (b_.fail_code != grpc::StatusCode::OK) {
      FinishLocked(grpc::Status(b_.fail_code, b_.fail_message));
    } else if (!b_.hold) {
      FinishLocked(grpc::Status::OK);
    }
    // hold: the stream stays open until OnCancel.
  }

  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  FakeWorker::Counters* counters_;
  FakeBehaviour b_;
  grpc::ByteBuffer message_, last_;
  std::mutex mu_;
  int sent_ = 0;
  bool writing_ = false;
  bool finished_ = false;
  bool cancelled_flag_ = false;
};

class FakeGeneration final
    : public llm::v1::Generation::WithRawCallbackMethod_Generate<llm::v1::Generation::Service> {
 public:
  FakeGeneration(FakeWorker::State* state, FakeWorker::Counters* counters)
      : state_(state), counters_(counters) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer*) override {
    ++counters_->calls;
    const auto deadline = context->deadline();
    const auto now = std::chrono::system_clock::now();
    counters_->deadline_ms =
        deadline > now + std::chrono::hours(24 * 365)
            ? -1
            : std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    return new FakeStream(state_, context, counters_);
  }

 private:
  FakeWorker::State* state_;
  FakeWorker::Counters* counters_;
};

class FakeLoad final : public llm::v1::WorkerLoad::Service {
 public:
  explicit FakeLoad(FakeWorker::State* state) : state_(state) {}
  grpc::Status WatchLoad(grpc::ServerContext* context, const llm::v1::WatchLoadRequest*,
                         grpc::ServerWriter<llm::v1::LoadReport>* writer) override {
    uint64_t sequence = 0;
    for (;;) {
      llm::v1::LoadReport report;
      uint64_t version;
      {
        std::lock_guard<std::mutex> lock(state_->mu);
        if (state_->shutdown) return grpc::Status::OK;
        report = state_->load;
        version = state_->load_version;
      }
      report.set_sequence(++sequence);
      if (!writer->Write(report)) return grpc::Status::OK;
      // Until the load changes, a second passes, or the watcher leaves.
      std::unique_lock<std::mutex> lock(state_->mu);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (!state_->shutdown && state_->load_version == version &&
             std::chrono::steady_clock::now() < until && !context->IsCancelled()) {
        state_->cv.wait_for(lock, std::chrono::milliseconds(50));
      }
      if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
  }

 private:
  FakeWorker::State* state_;
};

llm::v1::LoadReport IdleLoad() {
  llm::v1::LoadReport r;
  r.set_worker_id("fake");
  r.set_max_slots(64);
  r.set_free_slots(64);
  r.set_kv_blocks_total(1000);
  r.set_kv_block_tokens(16);
  r.set_step_time_ewma_ms(1.0);
  r.set_max_context_tokens(4096);
  r.set_model("fake-model");
  return r;
}

}  // namespace

std::unique_ptr<FakeWorker> FakeWorker::Start(const FakeBehaviour& behaviour, int port) {
  std::unique_ptr<FakeWorker> w(new FakeWorker());
  w->state_ = std::make_shared<State>();
  w->state_->worker = w.get();
  w->state_->behaviour = behaviour;
  w->state_->load = IdleLoad();
  w->generation_ = std::make_unique<FakeGeneration>(w->state_.get(), &w->counters_);
  w->load_ = std::make_unique<FakeLoad>(w->state_.get());
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                           &w->port_);
  builder.RegisterService(w->generation_.get());
  builder.RegisterService(w->load_.get());
  w->server_ = builder.BuildAndStart();
  if (w->server_ == nullptr || w->port_ == 0) return nullptr;
  return w;
}

FakeWorker::~FakeWorker() { Shutdown(); }

void FakeWorker::Shutdown() {
  if (state_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->shutdown) return;
    state_->shutdown = true;
  }
  state_->cv.notify_all();
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

void FakeWorker::SetBehaviour(const FakeBehaviour& behaviour) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->behaviour = behaviour;
}

FakeBehaviour FakeWorker::behaviour() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->behaviour;
}

void FakeWorker::SetLoad(const llm::v1::LoadReport& report) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->load = report;
    ++state_->load_version;
  }
  state_->cv.notify_all();
}

llm::v1::LoadReport FakeWorker::load() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->load;
}

}  // namespace llm::tools
