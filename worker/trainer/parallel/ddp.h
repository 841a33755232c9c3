// Data parallelism: a c10d process group (Gloo on CPU, NCCL on CUDA builds) and a
// DDP-style gradient synchroniser.
//
//   ProcessGroup   rank 0 hosts a c10d::TCPStore at MASTER_ADDR:MASTER_PORT, every rank
//                  joins the Gloo (or NCCL) group through it; collectives time out after
//                  `timeout`, so a dead peer makes the others fail instead of hanging.
//   GradientSync   parameters are broadcast from rank 0; during backward a post-hook on
//                  each parameter's gradient accumulator marks it ready, and a bucket
//                  (about bucket_bytes of gradients, in reverse parameter order, one
//                  flattened tensor) is all-reduced as soon as all its gradients are
//                  ready, so communication overlaps the rest of backward. Finish() waits
//                  for every bucket and writes the averaged gradients back.
//
// Buckets are launched strictly in bucket order (a ready bucket waits for the ones before
// it), so every rank issues the same collectives in the same order whatever order its
// hooks fire in. Gradient accumulation: set_sync(false) (or a NoSync scope) for all but
// the last micro-batch; backward then only accumulates locally.
#ifndef NIGHTSHIFT_WORKER_TRAINER_PARALLEL_DDP_H_
#define NIGHTSHIFT_WORKER_TRAINER_PARALLEL_DDP_H_

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <vector>

#include "worker/trainer/compat.h"
#include "worker/trainer/config.h"

namespace nightshift::trainer {

struct ProcessGroupOptions {
  int rank = 0;                  // this process, in [0, world_size)
  int world_size = 1;
  std::string master_addr;       // where rank 0 hosts the store; "" means 127.0.0.1
  int master_port = 0;           // the store's TCP port (required when world_size > 1)
  std::chrono::milliseconds timeout{300000};  // rendezvous and every collective
  bool use_agent_store = false;  // torchrun hosts the store itself: rank 0 joins as a client
  std::string store_prefix = "nightshift/0";  // key prefix (torchrun: per restart)
  bool cuda = false;             // NCCL (CUDA builds only) instead of Gloo
  int cuda_device = 0;           // NCCL: this rank's device index (made current)
};

class ProcessGroup {
 public:
  // Connects to (rank 0: hosts) the store and builds the group. Throws
  // std::runtime_error naming the address when the rendezvous fails or times out.
  static std::shared_ptr<ProcessGroup> Create(const ProcessGroupOptions& options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Blocking collectives. Each throws std::runtime_error on timeout or a lost peer.
  // They take tensors on any device: one that is not on the group's device (NCCL
  // reduces CUDA tensors only) is copied there and the result copied back.
  void Broadcast(torch::Tensor& tensor, int root = 0);  // in place, one dense tensor
  void AllReduceSum(torch::Tensor& tensor);             // in place, one dense tensor
  void Barrier();
  // Sharded data parallelism (sharded_adamw.h), both on the group's device only:
  // output [n] = the sum over ranks of input[rank * n, (rank + 1) * n) (input [size * n]);
  // output [size * n] = every rank's input [n], in rank order.
  void ReduceScatterSum(torch::Tensor& output, torch::Tensor& input);
  void AllGather(torch::Tensor& output, torch::Tensor& input);
  // The same two, started: Wait(handle) blocks for the result (the tensors must stay
  // alive and untouched until then). Fully sharded training (fully_sharded.h) gathers the
  // next block and reduces the last one's gradients while a block computes.
  struct Pending;
  std::shared_ptr<Pending> ReduceScatterSumAsync(torch::Tensor& output, torch::Tensor& input);
  std::shared_ptr<Pending> AllGatherAsync(torch::Tensor& output, torch::Tensor& input);
  // True on every rank when `local` is true on at least one (an all-reduce MAX).
  bool AnyRank(bool local);
  // The same for several flags at once (one collective).
  std::vector<bool> AnyRank(const std::vector<bool>& local);
  // The smallest of every rank's `local` (an all-reduce MAX of the negated values).
  int64_t MinOverRanks(int64_t local);
  // The sum of every rank's `local` (an all-reduce in float64).
  double SumOverRanks(double local);

  // Starts an in-place sum all-reduce of one dense tensor; `done` is called (on a
  // communication thread, maybe before this returns) when it completes. Wait(handle)
  // blocks for it and rethrows its error.
  std::shared_ptr<Pending> AllReduceSumAsync(torch::Tensor& tensor, std::function<void()> done);
  void Wait(const std::shared_ptr<Pending>& pending);

  // Lockstep catch-up (oom.h, sharding full): how many collectives this rank has issued
  // (started, on any thread) since the group was made; Skip(n): the next n return at once
  // without communicating (outputs untouched, unwritten: Wait returns), for a rank that
  // reruns a step whose first n collectives it had issued already (Skip(0) ends it); only
  // the blocks' all-gathers and reduce-scatters may be skipped (another kind meanwhile is a
  // std::logic_error: its result would be this rank's own). skipping(): of those n, not
  // reached yet.
  int64_t issued() const { return issued_.load(); }
  void Skip(int64_t n) { skip_.store(n); }
  int64_t skipping() const { return skip_.load(); }

 private:
  struct Impl;
  ProcessGroup(int rank, int size, std::unique_ptr<Impl> impl);
  void AllReduceMax(torch::Tensor& tensor);  // in place, blocking
  // Starts a collective (`start` sets the Pending's work), or skips it (Skip); one that
  // cannot start throws std::runtime_error naming `what` and the group.
  std::shared_ptr<Pending> Launch(const char* what, const std::function<void(Pending&)>& start);
  // std::invalid_argument naming `what` unless both tensors are on the group's device.
  void RequireGroupDevice(const char* what, const torch::Tensor& a, const torch::Tensor& b) const;
  // Runs the blocking `collective` on `tensor`, or on a copy of it on the group's device.
  void OnGroupDevice(torch::Tensor& tensor, const std::function<void(torch::Tensor&)>& collective);
  const int rank_, size_;
  std::unique_ptr<Impl> impl_;
  std::atomic<int64_t> issued_{0}, skip_{0};
};

struct GradientSyncOptions {
  int64_t bucket_bytes = 25 << 20;  // gradient bytes per all-reduce bucket (>= 1)
  bool overlap = true;  // launch buckets from backward hooks; false: all at Finish()
  bool reduce_bf16 = false;  // float32 gradients all-reduced as bf16 (resources.reduce_precision)
};

// What the last synchronised step's communication cost.
struct SyncStats {
  double allreduce_seconds = 0;  // first bucket launch to last bucket completion
  double wait_seconds = 0;       // time Finish() blocked (communication not hidden)
  double hidden_fraction = 0;    // share of allreduce_seconds before backward ended
  int buckets = 0;
};

class GradientSync {
 public:
  // `parameters`: the model's trainable parameters (leaf tensors), in the model's
  // order. Registers the gradient hooks; keeps the accumulators alive.
  GradientSync(std::shared_ptr<ProcessGroup> group, std::vector<torch::Tensor> parameters,
               GradientSyncOptions options = {});
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Copies rank 0's values of `tensors` (parameters and buffers) to every rank.
  void Broadcast(const std::vector<torch::Tensor>& tensors);

  // Whether the next backward passes synchronise (default true). With false, gradients
  // only accumulate locally, and Finish() is a no-op.
  void set_sync(bool sync);
  bool sync() const { return sync_.load(); }

  // After backward (with sync on): launches the buckets not yet launched, waits for all,
  // writes the averaged gradients back into param.grad() (creating zero gradients for
  // parameters that got none). Throws on a communication error.
  SyncStats Finish();

  // Instead of Finish() when this rank's backward failed (e.g. out of memory): issues
  // the same collectives as Finish() so every rank stays in step, then leaves the
  // gradients alone (zero them before retrying). Protocol for a coordinated retry:
  //   try { forward; backward; sync.Finish(); failed = false; }
  //   catch (OOM) { sync.Discard(); failed = true; }
  //   if (sync.AnyRank(failed)) { zero_grad; retry in micro-batches with NoSync... }
  void Discard();

  // All-reduce MAX of a flag (for coordinated decisions such as an OOM retry).
  bool AnyRank(bool local) { return group_->AnyRank(local); }
  ProcessGroup& group() { return *group_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  int64_t bucket_bytes() const;  // the buckets' flat gradients (bf16 with reduce_bf16), allocated or not

 private:
  struct Bucket;
  class Hook;
  void OnGradReady(size_t param_index);
  void LaunchReady();  // mu_ held
  void Launch(Bucket& bucket);
  SyncStats Run(bool apply);

  const std::shared_ptr<ProcessGroup> group_;
  const std::vector<torch::Tensor> params_;
  const GradientSyncOptions options_;
  std::vector<compat::NodePtr> accumulators_;  // keeps hooks alive
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_;  // parameter index -> bucket index
  std::atomic<bool> sync_{true};
  // What the hooks call through; cleared by the destructor (hooks outlive us).
  std::shared_ptr<std::atomic<GradientSync*>> owner_;

  std::mutex mu_;
  size_t next_launch_ = 0;  // guarded by mu_: buckets before it are launched
  bool stale_ = false;      // guarded by mu_: a gradient changed after its bucket was sent
  std::chrono::steady_clock::time_point first_launch_;  // guarded by mu_
};

// Turns gradient synchronisation off for its lifetime (then restores the old setting).
class NoSync {
 public:
  explicit NoSync(GradientSync* sync) : sync_(sync), old_(sync && sync->sync()) {
    if (sync_) sync_->set_sync(false);
  }
  ~NoSync() {
    if (sync_) sync_->set_sync(old_);
  }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;

 private:
  GradientSync* sync_;
  bool old_;
};

// The trainer's data-parallel setup. One rank: returns null. Several (RANK/WORLD_SIZE
// from the environment rule; a spec world_size above 1 must match WORLD_SIZE): joins the
// group with the spec's timeout and bucket size and copies rank 0's parameters and
// buffers to every rank. weights_as_loaded (nothing has written the parameters since
// LoadPretrained: no checkpoint, no export loaded into them): views of a weight file
// mapped alike on every rank are equal already and are not copied (hf_weights.h's
// MappedWeightFingerprint), which would write every page the ranks share. The group
// works on `device` (NCCL for CUDA), by default the parameters'; tensors elsewhere
// (sharding full's buffers, still on the host) are broadcast through it in chunks. With
// sharding full no parameter is: each rank has cut its parameters into its shards from the
// same load or seed already.
std::unique_ptr<GradientSync> StartDataParallel(const TrainConfig& config, const RankInfo& rank,
                                                torch::nn::Module& model, bool weights_as_loaded = false,
                                                std::optional<torch::Device> device = std::nullopt);

// Checks that `must_match` (the training position after a resume, the data's size: step,
// epoch, batch_in_epoch, total steps, samples) is the same on every rank, so mismatched
// ranks fail at once instead of hanging in a collective later; throws
// std::runtime_error naming both values if not.
void CheckRanksAgree(GradientSync& sync, const std::vector<int64_t>& must_match);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_PARALLEL_DDP_H_
