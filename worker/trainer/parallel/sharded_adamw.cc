#include "worker/trainer/parallel/sharded_adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "worker/trainer/checkpoint/optimizer_shards.h"

namespace nightshift::trainer {

struct ShardedAdamW::Layout {
  std::vector<torch::Tensor> params, pieces;
  std::vector<int64_t> offsets, piece_at, piece_param, piece_offset;
  int rank = 0, world_size = 1;
  int64_t total = 0, shard_numel = 0, begin = 0, end = 0, chunk_bytes = 0;
};

namespace {
int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }
}  // namespace

std::unique_ptr<ShardedAdamW> ShardedAdamW::Create(std::vector<torch::Tensor> params,
                                                   torch::optim::AdamWOptions options, int rank, int world_size,
                                                   int64_t chunk_bytes, int64_t align) {
  if (world_size < 1 || rank < 0 || rank >= world_size || align < 1)
    throw std::invalid_argument("ShardedAdamW: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  Layout l;
  l.rank = rank;
  l.world_size = world_size;
  l.chunk_bytes = std::max<int64_t>(chunk_bytes, 4);
  int64_t padded = 0;
  for (const torch::Tensor& p : params) {
    if (p.scalar_type() != torch::kFloat32 || !p.is_contiguous() || p.device() != params.front().device())
      throw std::invalid_argument("ShardedAdamW: the trainable parameters must be contiguous float32 on one device");
    l.offsets.push_back(padded);
    padded = RoundUp(padded + p.numel(), align);
    l.total += p.numel();
  }
  l.shard_numel = RoundUp((padded + world_size - 1) / world_size, align);
  const int64_t shard_begin = rank * l.shard_numel, shard_end = shard_begin + l.shard_numel;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].numel();
    l.begin += std::clamp<int64_t>(shard_begin - l.offsets[i], 0, n);  // values before the shard
    l.end += std::clamp<int64_t>(shard_end - l.offsets[i], 0, n);
    const int64_t lo = std::max(shard_begin, l.offsets[i]), hi = std::min(shard_end, l.offsets[i] + n);
    if (lo >= hi) continue;
    l.pieces.push_back(params[i].detach().view({-1}).narrow(0, lo - l.offsets[i], hi - lo));
    l.piece_at.push_back(lo - shard_begin);
    l.piece_param.push_back(static_cast<int64_t>(i));
    l.piece_offset.push_back(lo - l.offsets[i]);
  }
  l.params = std::move(params);
  return std::unique_ptr<ShardedAdamW>(new ShardedAdamW(std::move(l), options));
}

ShardedAdamW::ShardedAdamW(Layout l, torch::optim::AdamWOptions options)
    : FusedAdamW(l.pieces, options),
      params_(std::move(l.params)),
      offsets_(std::move(l.offsets)),
      pieces_(std::move(l.pieces)),
      piece_at_(std::move(l.piece_at)),
      piece_param_(std::move(l.piece_param)),
      piece_offset_(std::move(l.piece_offset)),
      rank_(l.rank),
      world_size_(l.world_size),
      total_(l.total),
      shard_numel_(l.shard_numel),
      begin_(l.begin),
      end_(l.end),
      chunk_bytes_(l.chunk_bytes) {}

int64_t ShardedAdamW::ChunkNumel() const {
  return std::max<int64_t>(1, std::min(shard_numel_, chunk_bytes_ / 4 / world_size_));
}

void ShardedAdamW::Gather(int64_t begin, int64_t end, bool grads, torch::Tensor dst) const {
  dst.zero_();
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), begin);
  for (size_t i = it == offsets_.begin() ? 0 : static_cast<size_t>(it - offsets_.begin() - 1);
       i < params_.size() && offsets_[i] < end; ++i) {
    const int64_t lo = std::max(begin, offsets_[i]), hi = std::min(end, offsets_[i] + params_[i].numel());
    if (lo >= hi) continue;  // [begin, end) falls in the padding after params_[i]
    const torch::Tensor& source = grads ? params_[i].grad() : params_[i];
    if (!source.defined()) continue;  // no gradient on this rank: contributes zeros
    dst.narrow(0, lo - begin, hi - lo).copy_(source.detach().reshape({-1}).narrow(0, lo - offsets_[i], hi - lo));
  }
}

void ShardedAdamW::Scatter(int64_t begin, int64_t end, const torch::Tensor& src) {
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), begin);
  for (size_t i = it == offsets_.begin() ? 0 : static_cast<size_t>(it - offsets_.begin() - 1);
       i < params_.size() && offsets_[i] < end; ++i) {
    const int64_t lo = std::max(begin, offsets_[i]), hi = std::min(end, offsets_[i] + params_[i].numel());
    if (lo >= hi) continue;
    params_[i].detach().view({-1}).narrow(0, lo - offsets_[i], hi - lo).copy_(src.narrow(0, lo - begin, hi - lo));
  }
}

void ShardedAdamW::ReduceGradients() {
  torch::NoGradGuard no_grad;
  if (params_.empty()) return;
  const auto options = params_.front().options().requires_grad(false);
  shard_grad_ = torch::empty({shard_numel_}, options);
  const int64_t chunk = ChunkNumel();
  const auto wire = reduce_bf16_ ? options.dtype(torch::kBFloat16) : options;
  torch::Tensor input = torch::empty({chunk * world_size_}, wire);
  torch::Tensor reduced = reduce_bf16_ ? torch::empty({chunk}, wire) : torch::Tensor();
  // Chunk k of every rank's shard, rank after rank: reduce_scatter hands rank r the sum
  // of the r-th slices.
  for (int64_t at = 0; at < shard_numel_; at += chunk) {
    const int64_t n = std::min(chunk, shard_numel_ - at);
    torch::Tensor in = input.narrow(0, 0, n * world_size_);
    for (int r = 0; r < world_size_; ++r)
      Gather(r * shard_numel_ + at, r * shard_numel_ + at + n, /*grads=*/true, in.narrow(0, r * n, n));
    torch::Tensor out = shard_grad_.narrow(0, at, n);
    if (reduce_bf16_) {
      torch::Tensor low = reduced.narrow(0, 0, n);
      group_->ReduceScatterSum(low, in);
      out.copy_(low);
    } else {
      group_->ReduceScatterSum(out, in);
    }
  }
  shard_grad_.div_(world_size_);
  for (const torch::Tensor& p : params_) const_cast<torch::Tensor&>(p).mutable_grad().reset();  // the shard holds them now
  // Each piece gets a gradient of its own (Optimizer::zero_grad detaches gradients in
  // place, which a view refuses).
  for (size_t i = 0; i < pieces_.size(); ++i)
    const_cast<torch::Tensor&>(pieces_[i]).mutable_grad() = shard_grad_.narrow(0, piece_at_[i], pieces_[i].numel()).clone();
  shard_grad_ = torch::Tensor();
}

void ShardedAdamW::Rebind() {
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const torch::Tensor& p = params_[static_cast<size_t>(piece_param_[i])];
    torch::Tensor piece = pieces_[i];  // the same TensorImpl: the optimizer's state stays keyed to it
    if (piece.storage().is_alias_of(p.storage()) && piece.storage_offset() == p.storage_offset() + piece_offset_[i])
      continue;
    piece.set_(p.storage(), p.storage_offset() + piece_offset_[i], {piece.numel()}, {1});
  }
}

torch::Tensor ShardedAdamW::step(LossClosure closure) {
  {
    torch::NoGradGuard no_grad;
    Rebind();
  }
  torch::Tensor loss = FusedAdamW::step(std::move(closure));  // the pieces: this rank's slice of the parameters
  torch::NoGradGuard no_grad;
  if (params_.empty()) return loss;
  const auto options = params_.front().options().requires_grad(false);
  const int64_t chunk = ChunkNumel();
  torch::Tensor mine = torch::empty({chunk}, options), all = torch::empty({chunk * world_size_}, options);
  for (int64_t at = 0; at < shard_numel_; at += chunk) {
    const int64_t n = std::min(chunk, shard_numel_ - at);
    torch::Tensor in = mine.narrow(0, 0, n), out = all.narrow(0, 0, n * world_size_);
    Gather(rank_ * shard_numel_ + at, rank_ * shard_numel_ + at + n, /*grads=*/false, in);
    group_->AllGather(out, in);
    for (int r = 0; r < world_size_; ++r)
      if (r != rank_) Scatter(r * shard_numel_ + at, r * shard_numel_ + at + n, out.narrow(0, r * n, n));
  }
  return loss;
}

void StreamShardFile(ProcessGroup& group, int r, const std::string& name,
                     const std::function<void(const std::function<void(const char*, size_t)>&)>& write,
                     ShardedOptimizerState::ShardSink* sink) {
  // The sender streams its file in broadcasts of up to kPiece bytes, each after a header
  // {bytes, last}; the others follow the headers. No rank holds more than one piece of it.
  constexpr int64_t kPiece = int64_t{64} << 20;
  {
    if (sink) sink->Open(name);
    auto send = [&](torch::Tensor piece, bool last) {
      torch::Tensor header = torch::tensor({piece.numel(), int64_t{last}}, torch::kInt64);
      group.Broadcast(header, r);
      if (piece.numel() > 0) group.Broadcast(piece, r);
      if (sink && piece.numel() > 0) sink->Append(static_cast<const char*>(piece.data_ptr()), piece.numel());
    };
    if (r == group.rank()) {
      torch::Tensor staging = torch::empty({kPiece}, torch::kUInt8);
      int64_t filled = 0;
      write([&](const char* data, size_t n) {
        while (n > 0) {
          const int64_t take = std::min<int64_t>(static_cast<int64_t>(n), kPiece - filled);
          std::memcpy(static_cast<char*>(staging.data_ptr()) + filled, data, static_cast<size_t>(take));
          filled += take;
          data += take;
          n -= static_cast<size_t>(take);
          if (filled == kPiece) {
            send(staging, false);
            filled = 0;
          }
        }
      });
      send(staging.narrow(0, 0, filled), true);
    } else {
      torch::Tensor buffer;
      for (bool last = false; !last;) {
        torch::Tensor header = torch::zeros({2}, torch::kInt64);
        group.Broadcast(header, r);
        const int64_t n = header[0].item<int64_t>();
        last = header[1].item<int64_t>() != 0;
        if (n == 0) continue;
        if (!buffer.defined() || buffer.numel() < n) buffer = torch::empty({n}, torch::kUInt8);
        torch::Tensor piece = buffer.narrow(0, 0, n);
        group.Broadcast(piece, r);
        if (sink) sink->Append(static_cast<const char*>(piece.data_ptr()), static_cast<size_t>(n));
      }
    }
    if (sink) sink->Close();
  }
}

void ShardedAdamW::ExchangeShards(ShardSink* sink) {
  for (int r = 0; r < world_size_; ++r)
    StreamShardFile(
        *group_, r, OptimizerShardFileName(r, world_size_),
        [&](const std::function<void(const char*, size_t)>& out) { WriteOptimizerShard(*this, begin_, end_, total_, out); },
        sink);
}

std::vector<torch::Tensor> ShardedAdamW::LoadShards(const std::string& dir, const std::vector<std::string>& shards,
                                                    const Ranges& value_ranges) {
  const torch::Device device = params_.empty() ? torch::Device(torch::kCPU) : params_.front().device();
  std::vector<torch::Tensor> values;
  FlatAdamState s;
  if (value_ranges.empty()) {
    s = ReadCheckpointRanges(dir, shards, params_, {{begin_, end_}}, device).front();
  } else {  // the blocks of a sharding-full checkpoint: their values from the same files
    FlatRead read = ReadFlatState(dir, shards, {{begin_, end_}}, value_ranges, total_, device);
    s = std::move(read.moments.front());
    for (FlatAdamState& v : read.values) values.push_back(std::move(v.values));
  }
  s.begin = 0;
  s.end = end_ - begin_;
  SetFlatState(*this, s);
  return values;
}

}  // namespace nightshift::trainer
