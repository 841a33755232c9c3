// AdamW's state as one flat range, and its files in a checkpoint when it is cut across
// ranks (resources.sharding: optimizer, parallel/sharded_adamw.h).
//
// The flat layout: an optimizer's parameters laid end to end in their order (the model's
// trainable parameters, as BuildModel hands them to the optimizer), so value i of the
// range is one element of one parameter whatever the number of ranks. A sharded run's
// checkpoint holds one file per rank, optimizer-shard-RRRRR-of-NNNNN.pt, each a torch
// archive of its rank's range: begin, end, total and pieces (int64 scalars), step (AdamW's
// step count, the same for every parameter: they all step together), and exp_avg.I and
// exp_avg_sq.I for I < pieces (float32, one-dimensional: the moments of the rank's slices
// of the parameters, which laid end to end are [begin, end); written from the optimizer's
// own tensors, without a copy of the state). Any range [b, e) is read back from however many files cover it,
// so a checkpoint of N ranks resumes on M ranks, and on one or with sharding none (then
// the whole range, into a plain AdamW's per-parameter state).
#ifndef NIGHTSHIFT_WORKER_TRAINER_CHECKPOINT_OPTIMIZER_SHARDS_H_
#define NIGHTSHIFT_WORKER_TRAINER_CHECKPOINT_OPTIMIZER_SHARDS_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace nightshift::trainer {

// AdamW's state of the flat range [begin, end).
struct FlatAdamState {
  int64_t begin = 0, end = 0;
  int64_t step = 0;
  torch::Tensor exp_avg, exp_avg_sq;  // float32 [end - begin]
  torch::Tensor values;               // the parameters' own values (ReadFlatRanges with `values`)
};

// The number of values of `optimizer`'s parameters laid end to end.
int64_t FlatNumel(torch::optim::AdamW& optimizer);
// The state of `optimizer`'s parameters laid end to end: [0, their numel). Parameters
// without state yet (no step taken) read as zeros.
FlatAdamState FlatStateOf(torch::optim::AdamW& optimizer);
// The inverse: `state` must cover exactly `optimizer`'s parameters laid end to end
// (state.end - state.begin == their numel); makes every parameter's AdamWParamState.
void SetFlatState(torch::optim::AdamW& optimizer, const FlatAdamState& state);

std::string OptimizerShardFileName(int rank, int world_size);
bool IsOptimizerShardFile(const std::string& name);
// Streams the shard file of `optimizer` (whose parameters laid end to end are [begin, end)
// of `total` values) to `out`, a piece at a time.
void WriteOptimizerShard(torch::optim::AdamW& optimizer, int64_t begin, int64_t end, int64_t total,
                         const std::function<void(const char*, size_t)>& out);
// The same file from the moments of [begin, end) as pieces laid end to end (each
// one-dimensional or reshaped so; any device). With `values` (the same pieces of the
// parameters themselves), the file holds value.I too: the parameters that
// ShardedOptimizerState::ParametersInShards keeps out of model.pt.
void WriteFlatShard(const std::vector<torch::Tensor>& exp_avg, const std::vector<torch::Tensor>& exp_avg_sq,
                    int64_t step, int64_t begin, int64_t end, int64_t total,
                    const std::function<void(const char*, size_t)>& out, const std::vector<torch::Tensor>& values = {});

// In one pass over the shard files `files` in `dir` (any count, any cut; each loaded once),
// onto `device`: the moments of `moment_ranges` and the parameters' values of
// `value_ranges` (from the files that hold values), ranges of a flat layout of `total`
// values. Throws naming the file when one holds another total (another model) or the
// files do not cover a range.
struct FlatRead {
  std::vector<FlatAdamState> moments, values;
};
FlatRead ReadFlatState(const std::string& dir, const std::vector<std::string>& files,
                       const std::vector<std::pair<int64_t, int64_t>>& moment_ranges,
                       const std::vector<std::pair<int64_t, int64_t>>& value_ranges, int64_t total,
                       torch::Device device);
// Several ranges in one pass over the files. With `values`, the parameters' values of
// the ranges instead of their moments (from the files that hold values).
std::vector<FlatAdamState> ReadFlatRanges(const std::string& dir, const std::vector<std::string>& files,
                                          const std::vector<std::pair<int64_t, int64_t>>& ranges, int64_t total,
                                          torch::Device device, bool values = false);
// The ranges of the flat state of `params` (laid end to end) from the checkpoint in `dir`:
// from its shard files `shards` (ReadFlatRanges), or, when there are none, from an
// unsharded run's optimizer.pt, loaded whole into an AdamW over `params` and cut.
std::vector<FlatAdamState> ReadCheckpointRanges(const std::string& dir, const std::vector<std::string>& shards,
                                                const std::vector<torch::Tensor>& params,
                                                const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                                torch::Device device);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_CHECKPOINT_OPTIMIZER_SHARDS_H_
