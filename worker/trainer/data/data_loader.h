// The data pipeline: a background thread collates the next batches of an epoch's plan
// and stages them on the training device (device.h: pinned memory and a side-stream copy
// on CUDA) into a bounded queue while the loop trains. It touches no random number
// generator, so it cannot change what dropout draws (exact resume depends on that).
#ifndef NIGHTSHIFT_WORKER_TRAINER_DATA_DATA_LOADER_H_
#define NIGHTSHIFT_WORKER_TRAINER_DATA_DATA_LOADER_H_

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "worker/trainer/data/batching.h"

namespace nightshift::trainer {

class BatchPrefetcher {
 public:
  // Prepares plan[first], plan[first + 1], ... keeping up to `depth` batches ready;
  // `stage` (on the background thread) moves each collated batch to the device (null:
  // the batch stays on the host). `shard` and `plan` must outlive the prefetcher.
  BatchPrefetcher(const format::ShardReader& shard, const BatchPlan& plan, size_t first,
                  int64_t max_len, int64_t pad_id, int depth,
                  std::function<Batch(Batch)> stage = nullptr, bool packed = false);
  ~BatchPrefetcher();  // stops and joins the thread
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The next batch in plan order; adds the seconds spent waiting to *wait_seconds.
  // Rethrows an error of the background thread. Call at most plan.size() - first times.
  Batch Next(double* wait_seconds);

 private:
  void Run();

  // Constant after construction.
  const format::ShardReader& shard_;
  const BatchPlan& plan_;
  const int64_t max_len_, pad_id_;
  const bool packed_;  // Collate's packed rows
  const size_t depth_;
  const std::function<Batch(Batch)> stage_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;      // guarded by mu_
  size_t next_ = 0;              // guarded by mu_: next plan index to collate
  bool stop_ = false;            // guarded by mu_: asked to stop (or failed)
  bool finished_ = false;        // guarded by mu_: the thread produces nothing more
  std::exception_ptr error_;     // guarded by mu_
  std::thread thread_;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_DATA_DATA_LOADER_H_
