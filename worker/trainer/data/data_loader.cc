#include "worker/trainer/data/data_loader.h"

#include <chrono>
#include <stdexcept>

namespace nightshift::trainer {

BatchPrefetcher::BatchPrefetcher(const format::ShardReader& shard, const BatchPlan& plan,
                                 size_t first, int64_t max_len, int64_t pad_id, int depth,
                                 std::function<Batch(Batch)> stage, bool packed)
    : shard_(shard), plan_(plan), max_len_(max_len), pad_id_(pad_id), packed_(packed),
      depth_(static_cast<size_t>(std::max(depth, 1))), stage_(std::move(stage)), next_(first) {
  thread_ = std::thread([this] { Run(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchPrefetcher::Run() {
  while (true) {
    size_t index;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || ready_.size() < depth_; });
      if (stop_ || next_ >= plan_.size()) {
        finished_ = true;
        cv_.notify_all();
        return;
      }
      index = next_++;
    }
    try {
      Batch batch = Collate(shard_, plan_[index], max_len_, pad_id_, packed_);
      if (stage_) batch = stage_(std::move(batch));
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(batch));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      stop_ = true;
      finished_ = true;
    }
    cv_.notify_all();
  }
}

Batch BatchPrefetcher::Next(double* wait_seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || error_ || finished_; });
  *wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    throw std::logic_error("BatchPrefetcher::Next called past the end of the plan");
  }
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  lock.unlock();
  cv_.notify_all();
  return batch;
}

}  // namespace nightshift::trainer
