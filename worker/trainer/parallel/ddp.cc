#include "worker/trainer/parallel/ddp.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef NIGHTSHIFT_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "common/io/net.h"
#include "worker/trainer/compat.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/models/hf_weights.h"

namespace nightshift::trainer {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// The first line of a c10::Error (its backtrace follows), else what().
std::string Message(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

bool IsLoopback(const std::string& host) {
  return host.empty() || host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace

// ---------------------------------------------------------------- ProcessGroup

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::C10dBackend> backend;
  std::string where;  // "gloo at host:port, 2 ranks, timeout 300 s": for error messages
  torch::Device device{torch::kCPU};  // where the backend's tensors must live
};

struct ProcessGroup::Pending {
  c10::intrusive_ptr<c10d::Work> work;
};

std::shared_ptr<ProcessGroup> ProcessGroup::Create(const ProcessGroupOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw std::runtime_error("process group: rank " + std::to_string(o.rank) +
                             " outside world_size " + std::to_string(o.world_size));
  if (o.world_size > 1 && (o.master_port <= 0 || o.master_port > 65535))
    throw std::runtime_error("process group: MASTER_PORT is required when WORLD_SIZE > 1");
  const std::string host = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;
  auto impl = std::make_unique<Impl>();
  const char* backend_name = o.cuda ? "nccl" : "gloo";
  impl->where = std::string(backend_name) + " group of " + std::to_string(o.world_size) +
                " ranks at " + host + ":" + std::to_string(o.master_port) + ", timeout " +
                std::to_string(o.timeout.count() / 1000) + " s";
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(o.master_port);
    so.isServer = o.rank == 0 && !o.use_agent_store;
    so.numWorkers = static_cast<std::size_t>(o.world_size);
    so.waitWorkers = false;  // the group's own rendezvous below waits, with the timeout
    so.timeout = o.timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(host, so);
    impl->store = c10::make_intrusive<c10d::PrefixStore>(o.store_prefix, tcp);
    if (o.cuda) {
#ifdef NIGHTSHIFT_WITH_CUDA
      // NCCL binds its communicator to the current device.
      impl->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.cuda_device));
      c10::cuda::set_device(impl->device.index());
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = o.timeout;
      impl->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl->store, o.rank, o.world_size, options);
#else
      throw std::runtime_error("this trainer was built without CUDA (no NCCL)");
#endif
    } else {
      auto options = c10d::ProcessGroupGloo::Options::create(o.timeout);
      // Bind where peers can reach us: GLOO_SOCKET_IFNAME if set (as in PyTorch), the
      // loopback when the job is on this host, else our address on the route to the
      // master (the hostname may resolve to Debian's 127.0.1.1, or, on a Slurm node, to
      // nothing), else what the hostname resolves to.
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (ifname != nullptr && *ifname != '\0') {
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else if (IsLoopback(host)) {
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else {
        std::string error;
        const std::string ours = LocalAddressToward(host, &error);
        options->devices.push_back(ours.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                                : c10d::ProcessGroupGloo::createDeviceForHostname(ours));
      }
      options->threads = 2;
      impl->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, o.rank, o.world_size, options);
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot join the " + impl->where + " as rank " + std::to_string(o.rank) +
                             ": " + Message(e));
  }
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(o.rank, o.world_size, std::move(impl)));
}

ProcessGroup::ProcessGroup(int rank, int size, std::unique_ptr<Impl> impl)
    : rank_(rank), size_(size), impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup::Pending> ProcessGroup::Launch(const char* what,
                                                            const std::function<void(Pending&)>& start) {
  auto pending = std::make_shared<Pending>();
  for (int64_t left = skip_.load(); left > 0;) {
    if (std::string_view(what) != "all-gather" && std::string_view(what) != "reduce-scatter")
      throw std::logic_error(std::string(what) + " while skipping the blocks' collectives (ProcessGroup::Skip)");
    if (skip_.compare_exchange_weak(left, left - 1)) return pending;  // issued before: no work
  }
  try {
    start(*pending);
    ++issued_;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(what) + " failed in the " + impl_->where + ": " + Message(e));
  }
  return pending;
}

std::shared_ptr<ProcessGroup::Pending> ProcessGroup::AllReduceSumAsync(torch::Tensor& tensor,
                                                                       std::function<void()> done) {
  std::vector<at::Tensor> tensors = {tensor};
  return Launch("all-reduce", [&](Pending& p) {
    p.work = impl_->backend->allreduce(tensors, c10d::AllreduceOptions());
    if (done) p.work->getFuture()->addCallback([done = std::move(done)](c10::ivalue::Future&) { done(); });
  });
}

void ProcessGroup::Wait(const std::shared_ptr<Pending>& pending) {
  if (!pending->work) return;  // skipped (Skip)
  try {
    pending->work->wait();
  } catch (const std::exception& e) {
    throw std::runtime_error("collective failed in the " + impl_->where +
                             " (a peer died or timed out): " + Message(e));
  }
}

void ProcessGroup::OnGroupDevice(torch::Tensor& tensor, const std::function<void(torch::Tensor&)>& collective) {
  if (tensor.device() == impl_->device) return collective(tensor);
  torch::Tensor there = tensor.to(impl_->device);
  collective(there);
  tensor.copy_(there);
}

void ProcessGroup::AllReduceSum(torch::Tensor& tensor) {
  OnGroupDevice(tensor, [this](torch::Tensor& t) { Wait(AllReduceSumAsync(t, nullptr)); });
}

void ProcessGroup::Broadcast(torch::Tensor& input, int root) {
  OnGroupDevice(input, [this, root](torch::Tensor& tensor) {
    std::vector<at::Tensor> tensors = {tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    Wait(Launch("broadcast", [&](Pending& p) { p.work = impl_->backend->broadcast(tensors, options); }));
  });
}

// The two collectives of sharded data parallelism (sharded_adamw.h). Inputs and outputs
// on the group's device (NCCL reduces CUDA tensors only); no copies made for them.
void ProcessGroup::ReduceScatterSum(torch::Tensor& output, torch::Tensor& input) {
  Wait(ReduceScatterSumAsync(output, input));
}

void ProcessGroup::AllGather(torch::Tensor& output, torch::Tensor& input) { Wait(AllGatherAsync(output, input)); }

std::shared_ptr<ProcessGroup::Pending> ProcessGroup::ReduceScatterSumAsync(torch::Tensor& output,
                                                                           torch::Tensor& input) {
  RequireGroupDevice("reduce-scatter", output, input);
  c10d::ReduceScatterOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  return Launch("reduce-scatter",
                [&](Pending& p) { p.work = impl_->backend->reduce_scatter_single(output, input, options); });
}

std::shared_ptr<ProcessGroup::Pending> ProcessGroup::AllGatherAsync(torch::Tensor& output, torch::Tensor& input) {
  RequireGroupDevice("all-gather", output, input);
  return Launch("all-gather",
                [&](Pending& p) { p.work = impl_->backend->all_gather_single(output, input, c10d::AllgatherOptions()); });
}

void ProcessGroup::RequireGroupDevice(const char* what, const torch::Tensor& a, const torch::Tensor& b) const {
  if (a.device() != impl_->device || b.device() != impl_->device)
    throw std::invalid_argument(std::string(what) + ": tensors must be on " + impl_->device.str());
}

void ProcessGroup::Barrier() {
  // An all-reduce of one element: the same as a barrier, and the same code path on
  // Gloo and NCCL (whose barrier needs a device).
  torch::Tensor t = torch::zeros({1}, torch::kInt32);
  AllReduceSum(t);
}

void ProcessGroup::AllReduceMax(torch::Tensor& input) {
  OnGroupDevice(input, [this](torch::Tensor& tensor) {
    std::vector<at::Tensor> tensors = {tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    Wait(Launch("all-reduce", [&](Pending& p) { p.work = impl_->backend->allreduce(tensors, options); }));
  });
}

std::vector<bool> ProcessGroup::AnyRank(const std::vector<bool>& local) {
  torch::Tensor flags = torch::zeros({static_cast<int64_t>(local.size())}, torch::kInt32);
  for (size_t i = 0; i < local.size(); ++i) flags[static_cast<int64_t>(i)] = local[i] ? 1 : 0;
  AllReduceMax(flags);
  std::vector<bool> out(local.size());
  for (size_t i = 0; i < local.size(); ++i) out[i] = flags[static_cast<int64_t>(i)].item<int32_t>() != 0;
  return out;
}

double ProcessGroup::SumOverRanks(double local) {
  torch::Tensor sum = torch::tensor({local}, torch::kFloat64);
  AllReduceSum(sum);
  return sum.item<double>();
}

int64_t ProcessGroup::MinOverRanks(int64_t local) {
  torch::Tensor value = torch::full({1}, -local, torch::kInt64);
  AllReduceMax(value);
  return -value.item<int64_t>();
}

bool ProcessGroup::AnyRank(bool local) { return AnyRank(std::vector<bool>{local})[0]; }

// ---------------------------------------------------------------- GradientSync

struct GradientSync::Bucket {
  std::vector<size_t> params;     // indices into params_
  std::vector<int64_t> offsets;   // element offset of each in `flat`
  // The flattened gradients, all-reduced in place: allocated by the first Launch, so that
  // the memory check before the first step (run.cc) runs before this copy of the
  // gradients counts against a rank's RLIMIT_DATA.
  torch::Tensor flat;
  int64_t numel = 0;
  torch::TensorOptions options;
  std::vector<bool> ready_mark;   // per entry of `params`: its gradient is ready
  size_t ready = 0;               // how many are
  bool launched = false;
  std::shared_ptr<ProcessGroup::Pending> pending;
  std::atomic<int64_t> done_ns{0};  // set on the communication thread on completion
};

// Fires after a parameter's gradient was accumulated into param.grad().
class GradientSync::Hook : public torch::autograd::FunctionPostHook {
 public:
  Hook(std::shared_ptr<std::atomic<GradientSync*>> owner, size_t index)
      : owner_(std::move(owner)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (GradientSync* sync = owner_->load()) sync->OnGradReady(index_);
    return outputs;
  }

 private:
  std::shared_ptr<std::atomic<GradientSync*>> owner_;  // null once the sync is gone
  size_t index_;
};

GradientSync::GradientSync(std::shared_ptr<ProcessGroup> group, std::vector<torch::Tensor> parameters,
                           GradientSyncOptions options)
    : group_(std::move(group)), params_(std::move(parameters)), options_(options),
      owner_(std::make_shared<std::atomic<GradientSync*>>(this)) {
  if (options_.bucket_bytes < 1) throw std::invalid_argument("GradientSync: bucket_bytes must be >= 1");
  // Buckets in reverse parameter order (roughly the order backward produces gradients),
  // one dtype and device per bucket, closed when they reach bucket_bytes.
  bucket_of_.assign(params_.size(), 0);
  std::unique_ptr<Bucket> open;
  int64_t open_bytes = 0;
  auto close = [&] {
    if (!open) return;
    int64_t numel = open->offsets.empty() ? 0 : open->offsets.back() + params_[open->params.back()].numel();
    open->numel = numel;
    open->options = params_[open->params.front()].options().requires_grad(false);
    if (options_.reduce_bf16 && open->options.dtype() == torch::kFloat32) open->options = open->options.dtype(torch::kBFloat16);
    open->ready_mark.assign(open->params.size(), false);
    buckets_.push_back(std::move(open));
    open_bytes = 0;
  };
  for (size_t k = params_.size(); k-- > 0;) {
    const torch::Tensor& p = params_[k];
    if (!p.requires_grad()) continue;
    if (open && (params_[open->params.front()].scalar_type() != p.scalar_type() ||
                 params_[open->params.front()].device() != p.device()))
      close();
    if (!open) open = std::make_unique<Bucket>();
    const int64_t offset = open->offsets.empty() ? 0 : open->offsets.back() + params_[open->params.back()].numel();
    open->params.push_back(k);
    open->offsets.push_back(offset);
    bucket_of_[k] = buckets_.size();
    open_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    if (open_bytes >= options_.bucket_bytes) close();
  }
  close();

  for (size_t k = 0; k < params_.size(); ++k) {
    if (!params_[k].requires_grad()) continue;
    compat::NodePtr acc = torch::autograd::impl::grad_accumulator(params_[k]);
    if (!acc) throw std::invalid_argument("GradientSync: parameter " + std::to_string(k) + " is not a leaf");
    acc->add_post_hook(std::make_unique<Hook>(owner_, k));
    accumulators_.push_back(std::move(acc));  // a dropped accumulator never fires its hook
  }
}

GradientSync::~GradientSync() {
  owner_->store(nullptr);
  // Communication in flight writes into our buffers: let it finish.
  for (auto& b : buckets_) {
    if (b->pending) {
      try {
        group_->Wait(b->pending);
      } catch (...) {
      }
    }
  }
}

void GradientSync::set_sync(bool sync) { sync_.store(sync); }

int64_t GradientSync::bucket_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : buckets_) bytes += b->numel * static_cast<int64_t>(b->options.dtype().itemsize());
  return bytes;
}

void GradientSync::OnGradReady(size_t param_index) {
  if (!sync_.load()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = *buckets_[bucket_of_[param_index]];
  const size_t slot = static_cast<size_t>(
      std::find(b.params.begin(), b.params.end(), param_index) - b.params.begin());
  if (b.launched) {
    stale_ = true;  // a second backward after this bucket was sent: its result is stale
    return;
  }
  if (b.ready_mark[slot]) return;
  b.ready_mark[slot] = true;
  ++b.ready;
  if (options_.overlap) LaunchReady();
}

void GradientSync::LaunchReady() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->ready == buckets_[next_launch_]->params.size()) {
    Launch(*buckets_[next_launch_]);
    ++next_launch_;
  }
}

void GradientSync::Launch(Bucket& b) {
  torch::NoGradGuard no_grad;
  if (!b.flat.defined()) b.flat = torch::empty({b.numel}, b.options);  // every slice is written below
  for (size_t i = 0; i < b.params.size(); ++i) {
    const torch::Tensor& p = params_[b.params[i]];
    torch::Tensor slice = b.flat.narrow(0, b.offsets[i], p.numel());
    const torch::Tensor& g = p.grad();
    if (g.defined()) {
      slice.copy_(g.reshape({-1}));
    } else {
      slice.zero_();  // no gradient on this rank (an unused parameter): contributes 0
    }
  }
  if (next_launch_ == 0) first_launch_ = Clock::now();
  b.launched = true;
  b.done_ns.store(0);
  Bucket* bp = &b;
  b.pending = group_->AllReduceSumAsync(b.flat, [bp] { bp->done_ns.store(NowNs()); });
}

SyncStats GradientSync::Run(bool apply) {
  SyncStats stats;
  if (!sync_.load()) return stats;
  const auto backward_end = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Parameters without a gradient never fired their hook; with overlap off nothing
    // was launched yet. Launch the rest, in bucket order.
    for (auto& b : buckets_) {
      b->ready = b->params.size();
      std::fill(b->ready_mark.begin(), b->ready_mark.end(), true);
    }
    LaunchReady();
  }
  std::exception_ptr error;
  for (auto& b : buckets_) {
    try {
      group_->Wait(b->pending);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  const auto waited = Clock::now();
  int64_t last_done = 0;
  for (auto& b : buckets_) last_done = std::max(last_done, b->done_ns.load());
  const auto first_launch = first_launch_;
  for (auto& b : buckets_) {
    b->launched = false;
    b->pending.reset();
    b->ready = 0;
    std::fill(b->ready_mark.begin(), b->ready_mark.end(), false);
  }
  next_launch_ = 0;
  if (error) std::rethrow_exception(error);
  if (stale_) {
    stale_ = false;
    throw std::logic_error(
        "GradientSync: a backward ran after its gradients were sent; for gradient "
        "accumulation, run all but the last micro-batch under NoSync / set_sync(false)");
  }

  if (apply) {
    torch::NoGradGuard no_grad;
    const double inv = 1.0 / group_->size();
    for (auto& b : buckets_) {
      b->flat.mul_(inv);
      for (size_t i = 0; i < b->params.size(); ++i) {
        torch::Tensor p = params_[b->params[i]];
        torch::Tensor slice = b->flat.narrow(0, b->offsets[i], p.numel()).view(p.sizes());
        if (p.grad().defined()) {
          p.mutable_grad().copy_(slice);
        } else {
          p.mutable_grad() = slice.to(p.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
        }
      }
    }
  }
  const int64_t first_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(first_launch.time_since_epoch()).count();
  const int64_t end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(backward_end.time_since_epoch()).count();
  if (last_done == 0) last_done = NowNs();  // no completion callback ran (should not happen)
  stats.buckets = static_cast<int>(buckets_.size());
  stats.allreduce_seconds = std::max<int64_t>(0, last_done - first_ns) / 1e9;
  stats.wait_seconds = std::chrono::duration<double>(waited - backward_end).count();
  stats.hidden_fraction =
      stats.allreduce_seconds > 0
          ? std::clamp((std::min(end_ns, last_done) - first_ns) / 1e9 / stats.allreduce_seconds, 0.0, 1.0)
          : 0.0;
  return stats;
}

SyncStats GradientSync::Finish() { return Run(/*apply=*/true); }
void GradientSync::Discard() { Run(/*apply=*/false); }

void GradientSync::Broadcast(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  // Consecutive tensors of one dtype and device, flattened into chunks of about
  // bucket_bytes (Gloo takes one tensor per call).
  size_t i = 0;
  while (i < tensors.size()) {
    size_t j = i;
    int64_t bytes = 0, numel = 0;
    while (j < tensors.size() && tensors[j].scalar_type() == tensors[i].scalar_type() &&
           tensors[j].device() == tensors[i].device() && (j == i || bytes < options_.bucket_bytes)) {
      bytes += tensors[j].numel() * static_cast<int64_t>(tensors[j].element_size());
      numel += tensors[j].numel();
      ++j;
    }
    torch::Tensor flat = torch::empty({numel}, tensors[i].options().requires_grad(false));
    int64_t offset = 0;
    for (size_t k = i; k < j; ++k) {
      flat.narrow(0, offset, tensors[k].numel()).copy_(tensors[k].reshape({-1}));
      offset += tensors[k].numel();
    }
    group_->Broadcast(flat, 0);
    offset = 0;
    for (size_t k = i; k < j; ++k) {
      torch::Tensor t = tensors[k];
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
    i = j;
  }
}

std::unique_ptr<GradientSync> StartDataParallel(const TrainConfig& config, const RankInfo& rank,
                                                torch::nn::Module& model, bool weights_as_loaded,
                                                std::optional<torch::Device> device) {
  if (config.data_parallel.world_size > 1 && config.data_parallel.world_size != rank.world_size)
    throw PermanentError("spec.resources.world_size is " + std::to_string(config.data_parallel.world_size) +
                             " but WORLD_SIZE is " + std::to_string(rank.world_size) + ": start " +
                             std::to_string(config.data_parallel.world_size) +
                             " ranks (e.g. torchrun --nproc_per_node) with RANK, WORLD_SIZE, "
                             "MASTER_ADDR and MASTER_PORT set");
  if (rank.world_size <= 1) return nullptr;
  // Sharding full: each rank has cut its model into its shards already, from the same
  // load or seed (run.cc), the blocks freed: the parameters are not sent (rank 0's whole
  // embeddings would no longer be what the shards hold), the buffers are.
  const bool cut = config.data_parallel.sharding == "full";
  std::vector<torch::Tensor> parameters;
  if (!cut) parameters = model.parameters();
  ProcessGroupOptions options;
  options.rank = rank.rank;
  options.world_size = rank.world_size;
  options.master_addr = rank.master_addr;
  options.master_port = rank.master_port;
  options.timeout = std::chrono::milliseconds(int64_t{config.data_parallel.timeout_seconds} * 1000);
  options.use_agent_store = rank.use_agent_store;
  options.store_prefix = "nightshift/" + std::to_string(rank.restart_count);
  if (!device && !parameters.empty()) device = parameters.front().device();
  options.cuda = device && device->is_cuda();
  if (options.cuda) options.cuda_device = device->index();
  GradientSyncOptions sync_options;
  sync_options.bucket_bytes = int64_t{config.data_parallel.bucket_mb} << 20;
  sync_options.reduce_bf16 = config.data_parallel.reduce_bf16;
  // Sharded (sharded_adamw.h): the optimizer reduce-scatters the gradients at the step;
  // the GradientSync then holds no parameters (no hooks, no all-reduce) and is the group.
  const bool sharded = config.data_parallel.sharding == "optimizer" || config.data_parallel.sharding == "full";
  auto sync = std::make_unique<GradientSync>(ProcessGroup::Create(options),
                                             sharded ? std::vector<torch::Tensor>{} : parameters, sync_options);

  // Rank 0's parameters and buffers to every rank, but for the views of a mapped weight
  // file (hf_weights.h) that every rank maps with the same bytes at the same place: writing
  // those would give each rank a private copy of the pages the ranks share. The set skipped
  // is rank 0's, so every rank broadcasts the same tensors; any rank that differs on one of
  // them has everything broadcast.
  std::vector<torch::Tensor> state;
  if (!cut) {  // (every rank takes the same branch: the spec is the same)
    torch::Tensor theirs = torch::zeros({static_cast<int64_t>(parameters.size())}, torch::kInt64);
    for (size_t i = 0; weights_as_loaded && i < parameters.size(); ++i)
      theirs[static_cast<int64_t>(i)] = static_cast<int64_t>(MappedWeightFingerprint(parameters[i]).value_or(0));
    const torch::Tensor mine = theirs.clone();
    sync->group().Broadcast(theirs, 0);
    const bool differs = !torch::equal(mine.masked_select(theirs.ne(0)), theirs.masked_select(theirs.ne(0)));
    const bool skip = !sync->AnyRank(differs);
    for (size_t i = 0; i < parameters.size(); ++i)
      if (!skip || theirs[static_cast<int64_t>(i)].item<int64_t>() == 0) state.push_back(parameters[i]);
  }
  for (const auto& b : model.buffers()) state.push_back(b);
  sync->Broadcast(state);

  return sync;
}

void CheckRanksAgree(GradientSync& sync, const std::vector<int64_t>& must_match) {
  torch::Tensor theirs = torch::tensor(must_match, torch::kInt64);
  const torch::Tensor mine = theirs.clone();
  sync.group().Broadcast(theirs, 0);
  const bool differs = !torch::equal(theirs, mine);
  if (sync.AnyRank(differs)) {
    auto str = [](const torch::Tensor& t) {
      std::string s;
      for (int64_t i = 0; i < t.numel(); ++i) s += (i ? "/" : "") + std::to_string(t[i].item<int64_t>());
      return s;
    };
    throw PermanentError("ranks disagree on where training stands or on the data (rank 0: " +
                             str(theirs) + ", rank " + std::to_string(sync.group().rank()) + ": " + str(mine) +
                             "): did they resume from different checkpoints or prepare different "
                             "data?");
  }
}

}  // namespace nightshift::trainer
