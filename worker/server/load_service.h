// llm.v1.WorkerLoad: streams LoadReports to each watcher (the routers). One publisher thread
// wakes on every load change and sends a report to each watcher whose rate bound allows it, and
// to every watcher that has heard nothing for a second.
#ifndef LLM_WORKER_SERVER_LOAD_SERVICE_H_
#define LLM_WORKER_SERVER_LOAD_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "llm/v1/worker_load.grpc.pb.h"
#include "worker/loop/worker.h"
#include "worker/server/convert.h"

namespace llm::server {

class LoadService final : public llm::v1::WorkerLoad::CallbackService {
 public:
  // `default_interval_ms`: rate bound when a watcher asks for none.
  explicit LoadService(int default_interval_ms);
  ~LoadService() override;

  // Starts publishing (once the worker exists). Before that, WatchLoad streams end at once.
  void Start(loop::Worker* worker, LoadFacts facts);
  // Ends every watch stream (shutdown).
  void Stop();

  grpc::ServerWriteReactor<llm::v1::LoadReport>* WatchLoad(
      grpc::CallbackServerContext* context, const llm::v1::WatchLoadRequest* request) override;

  class Watcher;

 private:
  void Publish();
  void Remove(Watcher* w);

  LoadFacts facts_;
  int default_interval_ms_;
  std::atomic<loop::Worker*> worker_{nullptr};

  std::mutex mu_;
  std::condition_variable cv_;
  std::set<Watcher*> watchers_;
  bool stop_ = false;
  std::thread thread_;
  friend class Watcher;
};

}  // namespace llm::server

#endif  // LLM_WORKER_SERVER_LOAD_SERVICE_H_
