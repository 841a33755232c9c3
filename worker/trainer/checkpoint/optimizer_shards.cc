#include "worker/trainer/checkpoint/optimizer_shards.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace nightshift::trainer {
namespace {

int64_t Scalar(torch::serialize::InputArchive& archive, const char* key) {
  torch::Tensor t;
  archive.read(key, t);
  return t.item<int64_t>();
}

std::vector<torch::Tensor> ParamsOf(torch::optim::AdamW& optimizer) {
  std::vector<torch::Tensor> params;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) params.push_back(p);
  return params;
}

}  // namespace

int64_t FlatNumel(torch::optim::AdamW& optimizer) {
  int64_t total = 0;
  for (const auto& p : ParamsOf(optimizer)) total += p.numel();
  return total;
}

FlatAdamState FlatStateOf(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> params = ParamsOf(optimizer);
  const int64_t total = FlatNumel(optimizer);
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  FlatAdamState s;
  s.end = total;
  s.exp_avg = torch::zeros({total}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  s.exp_avg_sq = torch::zeros_like(s.exp_avg);
  int64_t at = 0;
  for (const auto& p : params) {
    auto it = optimizer.state().find(p.unsafeGetTensorImpl());
    if (it != optimizer.state().end()) {
      const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      s.step = std::max(s.step, st.step());
      s.exp_avg.narrow(0, at, p.numel()).copy_(st.exp_avg().reshape({-1}));
      s.exp_avg_sq.narrow(0, at, p.numel()).copy_(st.exp_avg_sq().reshape({-1}));
    }
    at += p.numel();
  }
  return s;
}

void SetFlatState(torch::optim::AdamW& optimizer, const FlatAdamState& s) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> params = ParamsOf(optimizer);
  const int64_t total = FlatNumel(optimizer);
  if (s.end - s.begin != total)
    throw std::runtime_error("optimizer state of " + std::to_string(s.end - s.begin) + " values for " +
                             std::to_string(total) + " parameter values");
  optimizer.state().clear();
  int64_t at = 0;
  for (const auto& p : params) {
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(s.step);
    st->exp_avg(s.exp_avg.narrow(0, at, p.numel()).view(p.sizes()).to(p.device(), p.scalar_type()).clone());
    st->exp_avg_sq(s.exp_avg_sq.narrow(0, at, p.numel()).view(p.sizes()).to(p.device(), p.scalar_type()).clone());
    optimizer.state()[p.unsafeGetTensorImpl()] = std::move(st);
    at += p.numel();
  }
}

std::string OptimizerShardFileName(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof(name), "optimizer-shard-%05d-of-%05d.pt", rank, world_size);
  return name;
}

bool IsOptimizerShardFile(const std::string& name) {
  return name.rfind("optimizer-shard-", 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0;
}

void WriteFlatShard(const std::vector<torch::Tensor>& exp_avg, const std::vector<torch::Tensor>& exp_avg_sq,
                    int64_t step, int64_t begin, int64_t end, int64_t total,
                    const std::function<void(const char*, size_t)>& out, const std::vector<torch::Tensor>& values) {
  torch::serialize::OutputArchive archive;
  for (size_t i = 0; i < exp_avg.size(); ++i) {
    archive.write("exp_avg." + std::to_string(i), exp_avg[i].reshape({-1}).to(torch::kCPU));
    archive.write("exp_avg_sq." + std::to_string(i), exp_avg_sq[i].reshape({-1}).to(torch::kCPU));
    if (!values.empty()) archive.write("value." + std::to_string(i), values[i].reshape({-1}).to(torch::kCPU));
  }
  archive.write("begin", torch::tensor(begin, torch::kInt64));
  archive.write("end", torch::tensor(end, torch::kInt64));
  archive.write("total", torch::tensor(total, torch::kInt64));
  archive.write("step", torch::tensor(step, torch::kInt64));
  archive.write("pieces", torch::tensor(static_cast<int64_t>(exp_avg.size()), torch::kInt64));
  archive.save_to([&](const void* data, size_t n) -> size_t {
    out(static_cast<const char*>(data), n);
    return n;
  });
}

void WriteOptimizerShard(torch::optim::AdamW& optimizer, int64_t begin, int64_t end, int64_t total,
                         const std::function<void(const char*, size_t)>& out) {
  std::vector<torch::Tensor> ms, vs;
  int64_t step = 0;
  for (const torch::Tensor& p : ParamsOf(optimizer)) {
    auto it = optimizer.state().find(p.unsafeGetTensorImpl());
    torch::Tensor m, v;
    if (it != optimizer.state().end()) {
      const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      step = std::max(step, st.step());
      m = st.exp_avg();
      v = st.exp_avg_sq();
    } else {  // no step taken yet
      m = v = torch::zeros({p.numel()}, torch::kFloat32);
    }
    ms.push_back(m);
    vs.push_back(v);
  }
  WriteFlatShard(ms, vs, step, begin, end, total, out);
}


namespace {

// The states of `ranges`, zeroed: their values (FlatAdamState::values), else their moments.
std::vector<FlatAdamState> ZeroStates(const std::vector<std::pair<int64_t, int64_t>>& ranges, bool values,
                                      const torch::TensorOptions& options) {
  std::vector<FlatAdamState> out(ranges.size());
  for (size_t r = 0; r < ranges.size(); ++r) {
    out[r].begin = ranges[r].first;
    out[r].end = ranges[r].second;
    for (torch::Tensor* t : values ? std::vector<torch::Tensor*>{&out[r].values}
                                   : std::vector<torch::Tensor*>{&out[r].exp_avg, &out[r].exp_avg_sq})
      *t = torch::zeros({out[r].end - out[r].begin}, options);
  }
  return out;
}

// Piece i of `key` in `archive` (its pieces laid end to end from `at`) into every state of
// `into` it overlaps; returns its length.
int64_t CopyPiece(torch::serialize::InputArchive& archive, const std::string& key, int64_t i, int64_t at,
                  std::vector<FlatAdamState>& into) {
  torch::Tensor t;
  archive.read(key + "." + std::to_string(i), t);
  for (FlatAdamState& s : into) {
    const int64_t lo = std::max(at, s.begin), hi = std::min(at + t.numel(), s.end);
    torch::Tensor& to = key == "value" ? s.values : key == "exp_avg" ? s.exp_avg : s.exp_avg_sq;
    if (lo < hi) to.narrow(0, lo - s.begin, hi - lo).copy_(t.narrow(0, lo - at, hi - lo));
  }
  return t.numel();
}

void CheckCovered(const std::string& dir, std::vector<FlatAdamState>& out, const std::vector<int64_t>& covered,
                  int64_t step, const char* what) {
  for (size_t r = 0; r < out.size(); ++r) {
    out[r].step = step;
    if (covered[r] != out[r].end - out[r].begin)
      throw std::runtime_error("checkpoint: the optimizer shards in " + dir + " cover " + std::to_string(covered[r]) +
                               " of the " + what + " [" + std::to_string(out[r].begin) + ", " +
                               std::to_string(out[r].end) + ") this rank needs");
  }
}

}  // namespace

FlatRead ReadFlatState(const std::string& dir, const std::vector<std::string>& files,
                       const std::vector<std::pair<int64_t, int64_t>>& moment_ranges,
                       const std::vector<std::pair<int64_t, int64_t>>& value_ranges, int64_t total,
                       torch::Device device) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  FlatRead read{ZeroStates(moment_ranges, false, options), ZeroStates(value_ranges, true, options)};
  std::vector<int64_t> moments_covered(moment_ranges.size(), 0), values_covered(value_ranges.size(), 0);
  int64_t file_step = 0;
  bool first = true;
  for (const std::string& file : files) {
    const std::string path = dir + "/" + file;
    torch::serialize::InputArchive archive;
    archive.load_from(path, torch::kCPU);
    const int64_t b = Scalar(archive, "begin"), e = Scalar(archive, "end"), t = Scalar(archive, "total");
    if (t != total)
      throw std::runtime_error("checkpoint: " + path + " holds the optimizer state of " + std::to_string(t) +
                               " values; this run trains " + std::to_string(total));
    const int64_t step = Scalar(archive, "step");
    if (!first && step != file_step && e > b)
      throw std::runtime_error("checkpoint: " + path + " is at optimizer step " + std::to_string(step) +
                               ", another shard at " + std::to_string(file_step));
    if (first || e > b) file_step = step;
    first = false;
    // The file's pieces laid end to end are [b, e): each one's overlap with each range.
    // A file of moments only holds no values: its parameters' values are in model.pt.
    const int64_t pieces = Scalar(archive, "pieces");
    torch::Tensor probe;
    const bool has_values = !value_ranges.empty() && (pieces == 0 || archive.try_read("value.0", probe));
    int64_t at = b;
    for (int64_t i = 0; i < pieces; ++i) {
      int64_t length = 0;
      if (!moment_ranges.empty())
        for (const char* key : {"exp_avg", "exp_avg_sq"}) length = CopyPiece(archive, key, i, at, read.moments);
      if (has_values) length = CopyPiece(archive, "value", i, at, read.values);
      at += length;
    }
    if ((!moment_ranges.empty() || has_values) && at < e)
      throw std::runtime_error("checkpoint: " + path + "'s pieces hold " + std::to_string(at - b) + " values, not " +
                               std::to_string(e - b));
    const auto cover = [&](std::vector<int64_t>& covered, const std::vector<FlatAdamState>& out) {
      for (size_t r = 0; r < out.size(); ++r)
        covered[r] += std::max<int64_t>(0, std::min(e, out[r].end) - std::max(b, out[r].begin));
    };
    cover(moments_covered, read.moments);
    if (has_values) cover(values_covered, read.values);
  }
  CheckCovered(dir, read.moments, moments_covered, file_step, "values");
  CheckCovered(dir, read.values, values_covered, file_step, "parameter values");
  return read;
}

std::vector<FlatAdamState> ReadFlatRanges(const std::string& dir, const std::vector<std::string>& files,
                                          const std::vector<std::pair<int64_t, int64_t>>& ranges, int64_t total,
                                          torch::Device device, bool values) {
  return values ? ReadFlatState(dir, files, {}, ranges, total, device).values
                : ReadFlatState(dir, files, ranges, {}, total, device).moments;
}

std::vector<FlatAdamState> ReadCheckpointRanges(const std::string& dir, const std::vector<std::string>& shards,
                                                const std::vector<torch::Tensor>& params,
                                                const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                                torch::Device device) {
  torch::optim::AdamW whole(params, torch::optim::AdamWOptions());
  if (!shards.empty()) return ReadFlatRanges(dir, shards, ranges, FlatNumel(whole), device);
  torch::serialize::InputArchive archive;
  archive.load_from(dir + "/optimizer.pt", device);
  whole.load(archive);
  const FlatAdamState all = FlatStateOf(whole);
  std::vector<FlatAdamState> out;
  for (const auto& [begin, end] : ranges)
    out.push_back(FlatAdamState{begin, end, all.step, all.exp_avg.narrow(0, begin, end - begin),
                                all.exp_avg_sq.narrow(0, begin, end - begin)});
  return out;
}

}  // namespace nightshift::trainer
