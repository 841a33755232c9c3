#include "worker/trainer/parallel/fully_sharded.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "worker/trainer/checkpoint/optimizer_shards.h"
#include "worker/trainer/models/hf_weights.h"
#include "worker/trainer/parallel/sharded_adamw.h"

namespace nightshift::trainer {
namespace {

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Where the values rank r owns of a unit lie: `length` values of parameter `param` from
// value `offset` on, at `shard_at` in the rank's shard and at `flat_at` in the flat layout.
struct Piece {
  size_t param;
  int64_t offset, length, shard_at, flat_at;
};

// Calls `done` after autograd has accumulated a gradient into the tensor.
class AfterAccumulation : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit AfterAccumulation(std::function<void()> done) : done_(std::move(done)) {}
  void operator()(const torch::autograd::Variable&) override { done_(); }

 private:
  std::function<void()> done_;
};

}  // namespace

// A unit of trainable parameters, or (frozen) of a block's frozen parameters of one dtype:
// an adapter's base. A frozen unit rides along with its block's trainable unit (one of its
// `frozen_`): gathered and freed with it, except after the block's backward (see
// Accumulated), and never reduced.
class FullyShardedAdamW::Unit : public BlockParams {
 public:
  ~Unit() override {  // the hooks call this unit: the parameters may outlive it
    if (block() && !frozen())
      for (torch::Tensor& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
  }
  Unit(std::vector<torch::Tensor> params, int64_t block, int64_t flat_begin, int world_size, int64_t align,
       bool frozen = false)
      : params_(std::move(params)),
        block_(block),
        flat_begin_(flat_begin),
        world_size_(world_size),
        frozen_unit_(frozen),
        dtype_(params_.front().scalar_type()) {
    int64_t padded = 0;
    for (const torch::Tensor& p : params_) {
      offsets_.push_back(padded);
      padded = RoundUp(padded + p.numel(), align);
    }
    shard_numel_ = RoundUp((padded + world_size - 1) / world_size, align);
  }

  bool block() const { return block_ >= 0; }
  bool frozen() const { return frozen_unit_; }
  int64_t block_index() const { return block_; }
  bool Holds(const torch::Tensor& param) const {
    return std::any_of(params_.begin(), params_.end(),
                       [&](const torch::Tensor& p) { return p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl(); }) ||
           std::any_of(frozen_.begin(), frozen_.end(), [&](const auto& f) { return f->Holds(param); });
  }
  // The block's frozen parameters of one dtype, sharded with this unit; `shard` their
  // shard on this rank (not the optimizer's).
  void AddFrozen(std::unique_ptr<Unit> unit, torch::Tensor shard) {
    unit->owner_ = owner_;
    unit->shard_ = std::move(shard);
    frozen_.push_back(std::move(unit));
  }
  const std::vector<std::unique_ptr<Unit>>& frozen_units() const { return frozen_; }
  // Onto `device` (FullyShardedAdamW::MoveTo): a whole unit's values copied there; a freed
  // block's parameters made views of a storage there, which is freed at once (one block's
  // memory there for a moment). The frozen units and their shards with it.
  void MoveTo(torch::Device device) {
    torch::NoGradGuard no_grad;
    if (held_.defined() && held_.device() != device) held_ = held_.to(device);
    for (auto& f : frozen_) {
      if (f->shard_.device() != device) f->shard_.set_data(f->shard_.to(device));
      f->MoveTo(device);
    }
    if (!storage_) {  // never built: the parameters as they are
      for (torch::Tensor& p : params_)
        if (p.device() != device) p.set_data(p.to(device));
      return;
    }
    const bool freed = storage_.nbytes() == 0;
    if (!freed && !Views()) Build();  // loaded anew since it was built (as Shard does)
    torch::Tensor flat = freed ? torch::empty({padded_numel()}, Options().device(device)) : Flat().to(device);
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].set_data(flat.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes()));
    storage_ = flat.storage();
    low_now_ = false;
    low_storage_ = side_storage_ = c10::Storage();  // made again on the new device by AllocateLow
    if (freed) {
      storage_.set_data_ptr_noswap(storage_.allocator()->allocate(0));
      storage_.set_nbytes(0);
    }
  }
  int64_t bytes() const { return padded_numel() * static_cast<int64_t>(c10::elementSize(dtype_)); }
  // Gathered for a training step: in the compute dtype and the side range when SetLow
  // made some parameters low, else as bytes(); with what the gather holds until it ends
  // (StartGather: the shard's compute copy, and the side gather's send and receive buffers).
  int64_t gathered_bytes() const {
    if (!Low()) return bytes();
    const int64_t low = static_cast<int64_t>(c10::elementSize(low_dtype_));
    return (padded_numel() + shard_numel_) * low + 4 * (side_numel_ + side_shard_ * (world_size_ + 1));
  }
  int64_t shard_numel() const { return shard_numel_; }
  int64_t padded_numel() const { return shard_numel_ * world_size_; }

  // The values rank r owns, in the flat layout's order (they are one range there).
  std::vector<Piece> PiecesOf(int r) const {
    std::vector<Piece> pieces;
    const int64_t begin = r * shard_numel_, end = begin + shard_numel_;
    int64_t flat_at = flat_begin_;
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t n = params_[i].numel(), lo = std::max(begin, offsets_[i]), hi = std::min(end, offsets_[i] + n);
      if (lo < hi) pieces.push_back(Piece{i, lo - offsets_[i], hi - lo, lo - begin, flat_at + lo - offsets_[i]});
      flat_at += n;
    }
    return pieces;
  }
  // [begin, end) of the flat layout that PiecesOf(r) covers (empty: all padding).
  std::pair<int64_t, int64_t> RangeOf(int r) const {
    const std::vector<Piece> pieces = PiecesOf(r);
    if (pieces.empty()) return {flat_begin_, flat_begin_};
    return {pieces.front().flat_at, pieces.back().flat_at + pieces.back().length};
  }

  // Whether every parameter is a view of this unit's storage, allocated.
  bool Views() const {
    if (!storage_ || storage_.nbytes() == 0 || low_now_) return false;
    return std::all_of(params_.begin(), params_.end(),
                       [&](const torch::Tensor& p) { return p.storage().is_alias_of(storage_); });
  }
  // Makes the parameters views of a new padded range holding their values.
  void Build() {
    TORCH_CHECK(!low_now_, "FullyShardedAdamW: a block built from its compute copies");  // callers gather float32 first
    torch::NoGradGuard no_grad;
    torch::Tensor flat = torch::zeros({padded_numel()}, Options());
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& p = params_[i];
      flat.narrow(0, offsets_[i], p.numel()).copy_(p.detach().reshape({-1}));
      DropMappedPages(p);  // a view of a weight file's pages (hf_weights.h): out of this rank's resident set
      p.set_data(flat.narrow(0, offsets_[i], p.numel()).view(p.sizes()));
    }
    storage_ = flat.storage();
  }
  torch::Tensor Flat() const { return Over(storage_, dtype_, padded_numel()); }
  // The unit's values in this dtype, float32 master values (params_.front() may be a
  // compute copy: SetLow).
  torch::TensorOptions Options() const { return torch::TensorOptions().dtype(dtype_).device(params_.front().device()); }
  // A tensor of `numel` values of `dtype` over `storage`, written through it alone.
  torch::Tensor Over(const c10::Storage& storage, torch::ScalarType dtype, int64_t numel) const {
    torch::Tensor flat = torch::empty({0}, torch::TensorOptions().dtype(dtype).device(params_.front().device()));
    flat.set_(storage, 0, {numel}, {1});
    return flat;
  }
  void TakeShard(int rank, torch::Tensor& shard) const {
    torch::NoGradGuard no_grad;
    shard.copy_(Flat().narrow(0, rank * shard_numel_, shard_numel_));
  }
  // Shard(): the frozen units' shards from their whole parameters (built the first time).
  // One still freed (Reopen leaves them: a checkpoint holds no frozen tensor) keeps its shard.
  void ShardFrozen(int rank) {
    for (auto& f : frozen_) {
      if (f->Freed()) continue;
      if (!f->Views()) f->Build();
      f->TakeShard(rank, f->shard_);
    }
  }
  // Whether the parameters are still views of the freed storage (nothing loaded into them).
  bool Freed() const {
    return storage_ && storage_.nbytes() == 0 &&
           std::all_of(params_.begin(), params_.end(), [&](const torch::Tensor& p) { return p.storage().is_alias_of(storage_); });
  }
  // Compute copies (FullyShardedAdamW::GatherInDtype): params_[i] with low[i] are gathered
  // in `dtype` for a training step; the others' float32 values ride in a side gather of
  // their pieces (each rank's padded to the largest rank's count) into a storage of their
  // own, unpadded, in order.
  void SetLow(torch::ScalarType dtype, std::vector<bool> low, int rank) {
    if (std::none_of(low.begin(), low.end(), [](bool b) { return b; })) return;
    low_dtype_ = dtype;
    low_ = std::move(low);
    rank_ = rank;
    side_at_.assign(params_.size(), -1);
    side_numel_ = 0;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!low_[i]) side_at_[i] = std::exchange(side_numel_, side_numel_ + params_[i].numel());
    side_pieces_.assign(static_cast<size_t>(world_size_), {});
    for (int r = 0; r < world_size_; ++r) {
      int64_t count = 0;
      for (const Piece& piece : PiecesOf(r))
        if (!low_[piece.param]) {
          side_pieces_[static_cast<size_t>(r)].push_back(piece);
          count += piece.length;
        }
      side_shard_ = std::max(side_shard_, count);
    }
  }
  bool Low() const { return low_dtype_ != torch::kFloat32; }

  // Starts all-gathering the shards into the storage (allocated again when freed) unless
  // a gather of that kind is under way; WaitGather() ends it. A training step's gathers
  // (owner's compute_gathers_) are compute copies when SetLow made some. The storages are
  // written only through tensors of their own: the parameters' version counters stay.
  void StartGather(ProcessGroup& group, torch::Tensor shard) {
    for (auto& f : frozen_) f->StartGather(group, f->shard_);
    const bool low = Low() && owner_ != nullptr && owner_->compute_gathers_;
    if (gathering_ && gathering_low_ != low) WaitGather(group);  // prefetched for the other kind
    if (gathering_) return;
    torch::NoGradGuard no_grad;
    gathering_low_ = low;
    if (!low) {
      Allocate();
      gather_into_ = Flat();
      gather_from_ = shard;
      gathering_ = group.AllGatherAsync(gather_into_, gather_from_);
      return;
    }
    AllocateLow();
    gather_into_ = Over(low_storage_, low_dtype_, padded_numel());
    gather_from_ = shard.to(low_dtype_);
    gathering_ = group.AllGatherAsync(gather_into_, gather_from_);
    if (side_shard_ == 0) return;
    side_from_ = torch::zeros({side_shard_}, shard.options());
    int64_t at = 0;
    for (const Piece& piece : side_pieces_[static_cast<size_t>(rank_)]) {
      side_from_.narrow(0, at, piece.length).copy_(shard.narrow(0, piece.shard_at, piece.length));
      at += piece.length;
    }
    side_into_ = torch::empty({side_shard_ * world_size_}, shard.options());
    side_gathering_ = group.AllGatherAsync(side_into_, side_from_);
  }
  // The float32 storage allocated again when freed, unwritten (a spare block's memory if
  // one fits), and the parameters its views.
  void Allocate() {
    Fill(storage_, static_cast<size_t>(bytes()));
    Point(false);
  }
  // The compute copies' storages (made on the parameters' device the first time),
  // allocated, and the parameters their views.
  void AllocateLow() {
    const auto made = [&](c10::Storage& storage, torch::ScalarType dtype) {
      if (!storage) storage = torch::empty({0}, Options().dtype(dtype)).storage();
    };
    made(low_storage_, low_dtype_);
    made(side_storage_, torch::kFloat32);
    Fill(low_storage_, static_cast<size_t>(padded_numel()) * c10::elementSize(low_dtype_));
    Fill(side_storage_, static_cast<size_t>(side_numel_) * sizeof(float), /*spare=*/false);
    Point(true);
  }
  void Fill(c10::Storage& storage, size_t bytes, bool spare = true) const {
    if (storage.nbytes() == bytes) return;
    c10::DataPtr memory = spare && owner_ != nullptr ? owner_->TakeSpare(bytes) : c10::DataPtr();
    storage.set_data_ptr_noswap(memory ? std::move(memory) : storage.allocator()->allocate(bytes));
    storage.set_nbytes(bytes);
  }
  // The parameters made views of the compute copies (low) or of the float32 storage; the
  // storages they go to are allocated. Between steps only: a parameter keeps its dtype
  // while autograd's graph of a step refers to it.
  void Point(bool low) {
    if (low_now_ == low) return;
    torch::NoGradGuard no_grad;
    const torch::Tensor flat = low ? Over(low_storage_, low_dtype_, padded_numel()) : Flat();
    const torch::Tensor side = low ? Over(side_storage_, torch::kFloat32, side_numel_) : torch::Tensor();
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& p = params_[i];
      p.set_data(low && !low_[i] ? side.narrow(0, side_at_[i], p.numel()).view(p.sizes())
                                 : flat.narrow(0, offsets_[i], p.numel()).view(p.sizes()));
    }
    low_now_ = low;
  }
  // Its shards (this unit's, then its frozen units') from the whole parameters (the unit
  // built the first time, or again after a load replaced the parameters' storages); a
  // block freed after.
  void Cut(int rank, torch::Tensor& shard) {
    if (!Views()) Build();
    TakeShard(rank, shard);
    ShardFrozen(rank);
    if (block()) Free();
  }
  void WaitGather(ProcessGroup& group) {
    for (auto& f : frozen_) f->WaitGather(group);
    if (!gathering_) return;
    std::shared_ptr<ProcessGroup::Pending> pending = std::move(gathering_), side = std::move(side_gathering_);
    gathering_.reset();
    side_gathering_.reset();
    group.Wait(pending);
    gather_into_ = gather_from_ = torch::Tensor();
    if (!side) return;
    group.Wait(side);
    torch::NoGradGuard no_grad;
    torch::Tensor values = Over(side_storage_, torch::kFloat32, side_numel_);
    for (int r = 0; r < world_size_; ++r) {
      int64_t at = r * side_shard_;
      for (const Piece& piece : side_pieces_[static_cast<size_t>(r)]) {
        values.narrow(0, side_at_[piece.param] + piece.offset, piece.length)
            .copy_(side_into_.narrow(0, at, piece.length));
        at += piece.length;
      }
    }
    side_into_ = side_from_ = torch::Tensor();
  }
  void Gather(ProcessGroup& group, torch::Tensor shard) {
    StartGather(group, std::move(shard));
    WaitGather(group);
  }
  // Frees the parameters (the frozen units' too).
  void Free() {
    for (auto& f : frozen_) f->Free();
    FreeOwn();
  }
  void FreeOwn() {
    if (gathering_) WaitGather(*owner_->group_);  // Gloo is still writing into it
    Empty(storage_);
    if (low_storage_) Empty(low_storage_);
    if (side_storage_) Empty(side_storage_, /*keep=*/false);  // a few norms: not worth a spare's place
  }
  void Empty(c10::Storage& storage, bool keep = true) const {
    const size_t bytes = storage.nbytes();
    if (bytes == 0) return;
    c10::DataPtr memory = storage.set_data_ptr(storage.allocator()->allocate(0));
    storage.set_nbytes(0);
    // Kept for the next gathers once sharded; not while the model is being cut (the load's
    // blocks would pile up beside the one it writes).
    if (keep && owner_ != nullptr && owner_->sharded_) owner_->KeepSpare(bytes, std::move(memory));
  }
  // Starts reduce-scattering the parameters' gradients into a buffer and frees them;
  // FinishReduce() adds the result (averaged over ranks) to shard.grad(). One reduction
  // at a time per unit.
  void StartReduce(ProcessGroup& group) {
    FinishReduce(group);  // one at a time: an earlier one still under way is added first
    torch::NoGradGuard no_grad;
    const auto options = owner_ != nullptr && owner_->reduce_bf16_ ? shard_.options().dtype(torch::kBFloat16) : shard_.options();
    reduce_from_ = block() && owner_ != nullptr ? owner_->TakeReduceBuffer(padded_numel(), options)
                                                : torch::empty({padded_numel()}, options);
    if (held_any_) {  // the earlier micro-batches' sum, then this one's added, in float32
      Hold();
      reduce_from_.copy_(held_);
      DropAccumulated();
    } else {
      reduce_from_.zero_();  // the padding between parameters, and any without a gradient
      for (size_t i = 0; i < params_.size(); ++i)
        if (params_[i].grad().defined())
          reduce_from_.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].grad().reshape({-1}));
    }
    for (torch::Tensor& p : params_) p.mutable_grad().reset();
    reduce_into_ = torch::empty({shard_numel_}, options);
    reducing_ = group.ReduceScatterSumAsync(reduce_into_, reduce_from_);
  }
  void FinishReduce(ProcessGroup& group) {
    if (!reducing_) return;
    std::shared_ptr<ProcessGroup::Pending> pending = std::move(reducing_);
    reducing_.reset();
    group.Wait(pending);
    torch::NoGradGuard no_grad;
    torch::Tensor mine = reduce_into_.to(torch::kFloat32);  // the same tensor when it is float32
    if (block() && owner_ != nullptr) owner_->KeepReduceBuffer(std::move(reduce_from_));
    reduce_from_ = reduce_into_ = torch::Tensor();
    mine.div_(world_size_);
    if (shard_.grad().defined()) shard_.mutable_grad().add_(mine);
    else shard_.mutable_grad() = mine;
  }
  // Ends whatever collective is under way (before the storage or the gradients are read).
  void Settle(ProcessGroup& group) {
    WaitGather(group);
    FinishReduce(group);
  }

  const std::vector<torch::Tensor>& params() const { return params_; }
  // A block's parameters each count their accumulated gradient: the last one of a
  // backward reduce-scatters them all and frees the block.
  void Bind(const FullyShardedAdamW* owner, torch::Tensor shard) {
    owner_ = owner;
    shard_ = std::move(shard);
    if (!block() || frozen()) return;
    for (torch::Tensor& p : params_)
      torch::autograd::impl::set_post_acc_grad_hooks(p, std::make_unique<AfterAccumulation>([this] { Accumulated(); }));
  }
  // The reduction overlaps the next block's backward: the owner finishes it when the
  // next block's starts, or at ReduceGradients. The frozen units stay whole: a node that
  // reads a frozen weight for its input's gradient alone (the block's first norm, say) may
  // still run; they are freed at the next Acquire of another block, which comes after the
  // gradient of this block's input, or at the end of backward (FreeFrozenLeft).
  void Accumulated() {
    if (++accumulated_ < params_.size()) return;
    accumulated_ = 0;
    if (owner_->holding_ && held_.defined()) {
      Hold();
    } else {
      owner_->Reducing(this);
      StartReduce(*owner_->group_);
    }
    if (!owner_->sharded_) return;
    FreeOwn();
    if (frozen_.empty()) return;
    owner_->FreeFrozenLeft(this);  // one block's base left whole at a time
    owner_->frozen_left_ = this;
  }
  void FreeFrozen() {
    for (auto& f : frozen_) f->Free();
  }
  // Gradients accumulated since the last reduction (0 between backwards).
  size_t pending() const { return accumulated_; }
  // HoldGradients: the whole gradients' float32 buffer (padded, as the flat range); Hold()
  // moves the parameters' gradients into it (added, then freed).
  void AllocateHeld() { held_ = torch::zeros({padded_numel()}, shard_.options()); }
  bool held_defined() const { return held_.defined(); }
  bool held_any() const { return held_any_; }
  void Hold() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].grad().defined())
        held_.narrow(0, offsets_[i], params_[i].numel()).add_(params_[i].grad().reshape({-1}));
    for (torch::Tensor& p : params_) p.mutable_grad().reset();
    held_any_ = true;
  }
  // The gradients of a backward that did not end (an out-of-memory error inside it) leave
  // a count behind; dropped with the held sum (a step not taken, a retry).
  void DropAccumulated() {
    accumulated_ = 0;
    if (!held_any_) return;
    held_.zero_();
    held_any_ = false;
  }

  // BlockParams: only while the optimizer is sharded (whole, they are already there).
  void Prefetch() override {
    if (owner_->sharded_) StartGather(*owner_->group_, shard_);
  }
  void Acquire() override {
    owner_->FreeFrozenLeft(this);
    if (owner_->sharded_) Gather(*owner_->group_, shard_);
  }
  void Release() override {
    if (owner_->sharded_) Free();
  }

 private:
  const FullyShardedAdamW* owner_ = nullptr;  // Bind
  std::vector<torch::Tensor> params_;
  std::vector<int64_t> offsets_;  // params_[i] starts here in the padded range
  const int64_t block_;       // its block's index, or -1: resident
  const int64_t flat_begin_;  // the unit's first value in the flat layout (unpadded; trainable units)
  const int world_size_;
  const bool frozen_unit_;
  const torch::ScalarType dtype_;  // the storage's: float32, or a frozen unit's own
  std::vector<std::unique_ptr<Unit>> frozen_;  // the block's frozen units (trainable units only)
  int64_t shard_numel_ = 0;
  c10::Storage storage_;  // the padded range the parameters view; 0 bytes while freed
  torch::Tensor shard_;   // this rank's shard (shards_[i] of the optimizer; a frozen unit's own)
  size_t accumulated_ = 0;
  // SetLow: the compute copies' dtype (float32: none), which parameters are low, where
  // the others start in the side storage (-1: low), and each rank's pieces of them.
  torch::ScalarType low_dtype_ = torch::kFloat32;
  std::vector<bool> low_;
  std::vector<int64_t> side_at_;
  int64_t side_numel_ = 0, side_shard_ = 0;
  std::vector<std::vector<Piece>> side_pieces_;
  int rank_ = 0;
  c10::Storage low_storage_, side_storage_;  // 0 bytes while freed, as storage_
  bool low_now_ = false;                     // the parameters view them (else storage_)
  // Collectives under way, and the tensors they read and write until they end.
  std::shared_ptr<ProcessGroup::Pending> gathering_, side_gathering_, reducing_;
  bool gathering_low_ = false;
  torch::Tensor gather_into_, gather_from_, side_from_, side_into_, reduce_from_, reduce_into_;
  torch::Tensor held_;     // HoldGradients: the whole gradients' sum over the micro-batches so far
  bool held_any_ = false;  // held_ holds a sum (not zeros)
};

std::unique_ptr<FullyShardedAdamW> FullyShardedAdamW::Create(std::vector<torch::Tensor> params,
                                                             const std::vector<int64_t>& block_of,
                                                             torch::optim::AdamWOptions options, int rank,
                                                             int world_size, int64_t align) {
  if (world_size < 1 || rank < 0 || rank >= world_size || align < 1 || block_of.size() != params.size())
    throw std::invalid_argument("FullyShardedAdamW: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  std::vector<std::unique_ptr<Unit>> units;
  std::vector<torch::Tensor> shards;
  std::vector<int64_t> seen_blocks;
  int64_t flat = 0;
  for (size_t i = 0; i < params.size();) {
    size_t j = i;
    std::vector<torch::Tensor> members;
    for (; j < params.size() && block_of[j] == block_of[i]; ++j) {
      const torch::Tensor& p = params[j];
      if (p.scalar_type() != torch::kFloat32 || !p.is_contiguous() || p.device() != params.front().device())
        throw std::invalid_argument("FullyShardedAdamW: the trainable parameters must be contiguous float32 on one device");
      members.push_back(p);
    }
    if (block_of[i] >= 0) {
      if (std::count(seen_blocks.begin(), seen_blocks.end(), block_of[i]))
        throw std::invalid_argument("FullyShardedAdamW: block " + std::to_string(block_of[i]) +
                                    "'s parameters are not consecutive in the model's order");
      seen_blocks.push_back(block_of[i]);
    }
    int64_t numel = 0;
    for (const torch::Tensor& p : members) numel += p.numel();
    units.push_back(std::make_unique<Unit>(std::move(members), block_of[i], flat, world_size, align));
    flat += numel;
    shards.push_back(torch::zeros({units.back()->shard_numel()}, params.front().options().requires_grad(false)));
    i = j;
  }
  return std::unique_ptr<FullyShardedAdamW>(
      new FullyShardedAdamW(std::move(units), std::move(shards), options, rank, world_size, flat));
}

FullyShardedAdamW::FullyShardedAdamW(std::vector<std::unique_ptr<Unit>> units, std::vector<torch::Tensor> shards,
                                     torch::optim::AdamWOptions options, int rank, int world_size, int64_t total)
    : FusedAdamW(shards, options),
      units_(std::move(units)),
      shards_(std::move(shards)),
      rank_(rank),
      world_size_(world_size),
      total_(total) {
  for (size_t u = 0; u < units_.size(); ++u) units_[u]->Bind(this, shards_[u]);
}

FullyShardedAdamW::~FullyShardedAdamW() = default;

int64_t FullyShardedAdamW::AddFrozen(const std::vector<torch::Tensor>& params, const std::vector<int64_t>& block_of,
                                     int64_t align) {
  if (block_of.size() != params.size()) throw std::invalid_argument("FullyShardedAdamW::AddFrozen: one block per parameter");
  int64_t added = 0;
  if (shards_.empty()) return added;
  for (auto& unit : units_) {
    if (!unit->block() || !unit->frozen_units().empty()) continue;
    std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;  // one flat range per dtype
    std::set<const c10::TensorImpl*> seen;                                // a tied weight once
    for (size_t i = 0; i < params.size(); ++i)
      if (block_of[i] == unit->block_index() && !params[i].requires_grad() &&
          params[i].device() == shards_.front().device() && seen.insert(params[i].unsafeGetTensorImpl()).second)
        by_dtype[params[i].scalar_type()].push_back(params[i]);
    for (auto& [dtype, members] : by_dtype) {
      for (const torch::Tensor& p : members) added += p.numel();
      auto frozen = std::make_unique<Unit>(std::move(members), unit->block_index(), 0, world_size_, align, true);
      torch::Tensor shard = torch::zeros({frozen->shard_numel()}, shards_.front().options().dtype(dtype));
      unit->AddFrozen(std::move(frozen), std::move(shard));
    }
    spare_cap_ = std::max(spare_cap_, 2 * (1 + unit->frozen_units().size()));
  }
  return added;
}

void FullyShardedAdamW::GatherInDtype(torch::ScalarType dtype, const std::vector<bool>& low) {
  size_t at = 0;
  for (auto& unit : units_) {
    const size_t n = unit->params().size();
    if (at + n > low.size()) throw std::invalid_argument("FullyShardedAdamW::GatherInDtype: one flag per parameter");
    if (unit->block() && dtype != torch::kFloat32)
      unit->SetLow(dtype, std::vector<bool>(low.begin() + static_cast<std::ptrdiff_t>(at),
                                            low.begin() + static_cast<std::ptrdiff_t>(at + n)),
                   rank_);
    at += n;
  }
}

void FullyShardedAdamW::FreeFrozenLeft(const Unit* acquiring) const {
  if (frozen_left_ != nullptr && frozen_left_ != acquiring) frozen_left_->FreeFrozen();
  frozen_left_ = nullptr;
}

void FullyShardedAdamW::KeepSpare(size_t bytes, c10::DataPtr memory) const {
  // The newest kept: after an evaluation's float32 gathers the compute copies' sizes come
  // back, and the other way round.
  if (spare_.size() >= spare_cap_) spare_.erase(spare_.begin());
  spare_.emplace_back(bytes, std::move(memory));
}

c10::DataPtr FullyShardedAdamW::TakeSpare(size_t bytes) const {
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->first != bytes) continue;
    c10::DataPtr memory = std::move(it->second);
    spare_.erase(it);
    return memory;
  }
  return c10::DataPtr();
}

torch::Tensor FullyShardedAdamW::TakeReduceBuffer(int64_t numel, const torch::TensorOptions& options) const {
  for (auto it = reduce_spare_.begin(); it != reduce_spare_.end(); ++it) {
    if (it->numel() != numel || it->scalar_type() != options.dtype().toScalarType()) continue;
    torch::Tensor buffer = std::move(*it);
    reduce_spare_.erase(it);
    return buffer;
  }
  return torch::empty({numel}, options);
}

void FullyShardedAdamW::KeepReduceBuffer(torch::Tensor buffer) const {
  if (reduce_spare_.size() < 2) reduce_spare_.push_back(std::move(buffer));
}

std::vector<BlockParams*> FullyShardedAdamW::block_params(int64_t num_blocks) const {
  std::vector<BlockParams*> out(static_cast<size_t>(num_blocks), nullptr);
  for (const auto& unit : units_)
    if (unit->block() && unit->block_index() < num_blocks) out[static_cast<size_t>(unit->block_index())] = unit.get();
  return out;
}

void FullyShardedAdamW::Reducing(Unit* unit) const {
  // The same unit too: with one block, the next micro-batch's reduction is that block's
  // again, and starting it over the earlier one dropped that one's gradients.
  if (reducing_ != nullptr) reducing_->FinishReduce(*group_);
  reducing_ = unit;
}

void FullyShardedAdamW::Settle() {
  for (auto& unit : units_) unit->Settle(*group_);
  reducing_ = nullptr;
  if (sharded_) FreeFrozenLeft(nullptr);
}

void FullyShardedAdamW::Shard() {
  if (sharded_) return;
  torch::NoGradGuard no_grad;
  if (group_ != nullptr) Settle();
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u]->block() && u < cut_) continue;  // cut as the weights loaded (ShardBefore)
    torch::Tensor shard = shards_[u];
    units_[u]->Cut(rank_, shard);
  }
  cut_ = 0;
  sharded_ = true;
}

void FullyShardedAdamW::ShardBefore(const torch::Tensor& param) {
  if (sharded_) throw std::logic_error("FullyShardedAdamW: ShardBefore after Shard");
  size_t u = cut_;
  while (u < units_.size() && !(units_[u]->block() && units_[u]->Holds(param))) ++u;
  if (u == units_.size()) return;  // outside the blocks not cut yet
  torch::NoGradGuard no_grad;
  for (; cut_ < u; ++cut_) {
    torch::Tensor shard = shards_[cut_];
    if (units_[cut_]->block()) units_[cut_]->Cut(rank_, shard);
  }
}

void FullyShardedAdamW::Reopen() {
  if (!sharded_) return;
  if (group_ != nullptr) Settle();
  for (auto& unit : units_)
    if (unit->block()) unit->Allocate();  // the frozen units stay cut: no checkpoint holds them
  sharded_ = false;
}

void FullyShardedAdamW::ReopenFor(const torch::Tensor& param) {
  if (!sharded_) throw std::logic_error("FullyShardedAdamW: ReopenFor needs the blocks sharded");
  if (reopen_ == 0 && reopened_ == nullptr && group_ != nullptr) Settle();
  for (size_t u = reopen_; u < units_.size(); ++u) {
    if (!units_[u]->block() || !units_[u]->Holds(param)) continue;
    CutReopened();
    units_[u]->Allocate();  // its own storage only: the frozen units stay cut, as in Reopen
    reopened_ = units_[u].get();
    reopen_ = u + 1;
    return;
  }
  for (size_t u = 0; u < reopen_; ++u)  // a block already cut again: its storage is empty
    if (units_[u]->block() && units_[u].get() != reopened_ && units_[u]->Holds(param))
      throw std::logic_error("FullyShardedAdamW: ReopenFor out of the model's order");
}

void FullyShardedAdamW::EndReopen() {
  CutReopened();
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    torch::Tensor shard = shards_[u];
    if (!units_[u]->block()) units_[u]->Cut(rank_, shard);  // resident: stays whole, its shard taken again
  }
  reopen_ = 0;
}

void FullyShardedAdamW::CutReopened() {
  if (reopened_ == nullptr) return;
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].get() != reopened_) continue;
    torch::Tensor shard = shards_[u];
    reopened_->Cut(rank_, shard);
  }
  reopened_ = nullptr;
}

void FullyShardedAdamW::MoveTo(torch::Device device) {
  torch::NoGradGuard no_grad;
  if (group_ != nullptr) Settle();
  spare_.clear();  // memory of the old device
  reduce_spare_.clear();
  for (size_t u = 0; u < units_.size(); ++u) {
    torch::Tensor shard = shards_[u];
    if (shard.device() != device) shard.set_data(shard.to(device));  // the same tensor: the optimizer's still
    units_[u]->MoveTo(device);
  }
  for (auto& [impl, st] : state()) {
    auto& adam = static_cast<torch::optim::AdamWParamState&>(*st);
    for (const torch::Tensor& t : {adam.exp_avg(), adam.exp_avg_sq(), adam.max_exp_avg_sq()})
      if (t.defined() && t.device() != device) torch::Tensor(t).set_data(t.to(device));
  }
}

void FullyShardedAdamW::Unshard(int only_rank) {
  if (!sharded_) return;
  Settle();
  const bool keep = only_rank < 0 || only_rank == rank_;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u]->block()) continue;
    units_[u]->Gather(*group_, shards_[u]);
    if (!keep) units_[u]->Free();  // gathered for only_rank: one block at a time here
  }
  sharded_ = !keep;
}

void FullyShardedAdamW::GatherFor(const torch::Tensor& param) {
  for (size_t u = walk_; u < units_.size(); ++u)
    if (units_[u]->block() && units_[u]->Holds(param)) return WalkTo(u + 1);
}

void FullyShardedAdamW::EndWalk() {
  WalkTo(units_.size());
  if (walked_ != nullptr) walked_->Free();
  walked_ = nullptr;
  walk_ = 0;
}

void FullyShardedAdamW::WalkTo(size_t end) {
  if (!sharded_) throw std::logic_error("FullyShardedAdamW: the export's walk needs the blocks sharded");
  if (walk_ == 0) Settle();  // a gather prefetched by the last evaluation, a reduction
  for (; walk_ < end; ++walk_) {
    Unit& unit = *units_[walk_];
    if (!unit.block()) continue;
    if (walked_ != nullptr) walked_->Free();
    unit.Gather(*group_, shards_[walk_]);
    walked_ = &unit;
  }
}

void FullyShardedAdamW::HoldGradients() {
  for (const auto& unit : units_)
    if (unit->block()) unit->AllocateHeld();
}

void FullyShardedAdamW::DropAccumulated() {
  for (const auto& unit : units_) unit->DropAccumulated();
  if (!sharded_) return;
  for (const auto& unit : units_)  // whole after a forward or backward that did not end
    if (unit->block()) unit->Free();
}

int64_t FullyShardedAdamW::held_bytes() const {
  int64_t n = 0;
  for (const auto& unit : units_)
    if (unit->block()) n += unit->padded_numel();
  return 4 * n;
}

bool FullyShardedAdamW::holds_gradients() const {
  for (const auto& unit : units_)
    if (unit->held_defined()) return true;
  return false;
}

void FullyShardedAdamW::ReduceGradients() {
  Settle();  // the blocks' reductions (started as each block's backward ended) and any gather
  for (const auto& unit : units_)
    if (unit->block() && (unit->pending() != 0 || unit->held_any()))
      throw std::logic_error("sharding full: block " + std::to_string(unit->block_index()) +
                             (unit->held_any() ? "'s held gradient sum was never reduced"
                                               : " got " + std::to_string(unit->pending()) +
                                                     " of its parameters' gradients in backward"));
  for (const auto& unit : units_)
    if (!unit->block()) unit->StartReduce(*group_);
  for (const auto& unit : units_)
    if (!unit->block()) unit->FinishReduce(*group_);
}

torch::Tensor FullyShardedAdamW::step(LossClosure closure) {
  torch::Tensor loss = FusedAdamW::step(std::move(closure));
  for (size_t u = 0; u < units_.size(); ++u)
    if (!units_[u]->block()) units_[u]->Gather(*group_, shards_[u]);  // blocks gather when they next run
  return loss;
}

void FullyShardedAdamW::ExchangeShards(ShardSink* sink) {
  const int files = static_cast<int>(units_.size()) * world_size_;
  for (size_t u = 0; u < units_.size(); ++u) {
    for (int r = 0; r < world_size_; ++r) {
      auto write = [&](const std::function<void(const char*, size_t)>& out) {
        torch::Tensor m, v;
        int64_t step = 0;
        auto it = state().find(shards_[u].unsafeGetTensorImpl());
        if (it != state().end()) {
          const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
          m = st.exp_avg();
          v = st.exp_avg_sq();
          step = st.step();
        } else {
          m = v = torch::zeros_like(shards_[u]);
        }
        std::vector<torch::Tensor> ms, vs, values;  // a block's values too: model.pt leaves them out
        for (const Piece& p : units_[u]->PiecesOf(rank_)) {
          ms.push_back(m.narrow(0, p.shard_at, p.length));
          vs.push_back(v.narrow(0, p.shard_at, p.length));
          if (units_[u]->block()) values.push_back(shards_[u].narrow(0, p.shard_at, p.length));
        }
        const auto [begin, end] = units_[u]->RangeOf(rank_);
        WriteFlatShard(ms, vs, step, begin, end, total_, out, values);
      };
      StreamShardFile(*group_, r, OptimizerShardFileName(static_cast<int>(u) * world_size_ + r, files), write, sink);
    }
  }
}

std::vector<torch::Tensor> FullyShardedAdamW::ParametersInShards() const {
  std::vector<torch::Tensor> params;
  for (const auto& unit : units_)
    if (unit->block()) params.insert(params.end(), unit->params().begin(), unit->params().end());
  return params;
}

std::vector<torch::Tensor> FullyShardedAdamW::LoadShards(const std::string& dir, const std::vector<std::string>& shards,
                                                         const Ranges& value_ranges) {
  torch::NoGradGuard no_grad;
  const torch::Device device = shards_.empty() ? torch::Device(torch::kCPU) : shards_.front().device();
  Ranges ranges;
  for (const auto& unit : units_) ranges.push_back(unit->RangeOf(rank_));
  Ranges wanted;  // sharded, the blocks' values (into their shards); whole, the load wrote them
  for (size_t u = 0; u < units_.size(); ++u)
    if (sharded_ && units_[u]->block()) wanted.push_back(ranges[u]);
  const size_t own = wanted.size();
  wanted.insert(wanted.end(), value_ranges.begin(), value_ranges.end());
  FlatRead read;
  if (!wanted.empty()) {  // shard files (LoadCheckpoint made sure): moments and values, one pass
    read = ReadFlatState(dir, shards, ranges, wanted, total_, device);
  } else {
    std::vector<torch::Tensor> params;  // whole while a checkpoint loads: optimizer.pt is read into them
    for (const auto& unit : units_) params.insert(params.end(), unit->params().begin(), unit->params().end());
    read.moments = ReadCheckpointRanges(dir, shards, params, ranges, device);
  }
  const std::vector<FlatAdamState>& states = read.moments;
  state().clear();
  for (size_t u = 0; u < units_.size(); ++u) {
    torch::Tensor m = torch::zeros_like(shards_[u]), v = torch::zeros_like(shards_[u]);
    for (const Piece& p : units_[u]->PiecesOf(rank_)) {
      m.narrow(0, p.shard_at, p.length).copy_(states[u].exp_avg.narrow(0, p.flat_at - states[u].begin, p.length));
      v.narrow(0, p.shard_at, p.length).copy_(states[u].exp_avg_sq.narrow(0, p.flat_at - states[u].begin, p.length));
    }
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(states[u].step);
    st->exp_avg(m);
    st->exp_avg_sq(v);
    state()[shards_[u].unsafeGetTensorImpl()] = std::move(st);
  }
  std::vector<torch::Tensor> values;
  for (size_t i = own; i < read.values.size(); ++i) values.push_back(std::move(read.values[i].values));
  read.values.resize(own);
  if (sharded_) LoadShardValues(read.values);
  return values;
}

void FullyShardedAdamW::LoadShardValues(const std::vector<FlatAdamState>& values) {
  if (group_ != nullptr) Settle();  // nothing may still write a storage or a gradient
  for (size_t u = 0, b = 0; u < units_.size(); ++u) {
    Unit& unit = *units_[u];
    torch::Tensor shard = shards_[u];
    if (!unit.block()) {  // the load wrote the parameters' own storages (InputArchive's set_)
      if (!unit.Views()) unit.Build();
      unit.TakeShard(rank_, shard);
      continue;
    }
    const FlatAdamState& read = values[b++];
    for (const Piece& p : unit.PiecesOf(rank_))
      shard.narrow(0, p.shard_at, p.length).copy_(read.values.narrow(0, p.flat_at - read.begin, p.length));
  }
}

int64_t FullyShardedAdamW::shard_bytes() const {
  int64_t n = 0;
  for (const auto& unit : units_) n += unit->shard_numel();
  return 4 * n;
}

int64_t FullyShardedAdamW::resident_bytes() const {
  int64_t n = 0;
  for (const auto& unit : units_)
    if (!unit->block()) n += unit->padded_numel();
  return 4 * n;
}

int64_t FullyShardedAdamW::largest_gathered_bytes() const {
  int64_t n = 0;
  for (const auto& unit : units_)
    if (unit->block()) n = std::max(n, unit->gathered_bytes());
  return n;
}

int64_t FullyShardedAdamW::largest_block_bytes() const {
  int64_t n = 0;
  for (const auto& unit : units_)
    if (unit->block()) n = std::max(n, unit->padded_numel());
  return 4 * n;
}

FullyShardedAdamW::FrozenBytes FullyShardedAdamW::frozen_bytes() const {
  FrozenBytes b;
  int64_t blocks = 0;
  for (const auto& unit : units_) {
    int64_t block = 0;
    for (const auto& f : unit->frozen_units()) {
      for (const torch::Tensor& p : f->params()) b.whole += p.numel() * static_cast<int64_t>(p.element_size());
      b.shards += f->shard_numel() * static_cast<int64_t>(f->params().front().element_size());
      block += f->bytes();
    }
    b.largest_block = std::max(b.largest_block, block);
    blocks += unit->frozen_units().empty() ? 0 : 1;
  }
  b.held = b.shards + std::min<int64_t>(2, blocks) * b.largest_block;
  return b;
}

}  // namespace nightshift::trainer
