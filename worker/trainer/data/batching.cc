#include "worker/trainer/data/batching.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

namespace nightshift::trainer {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Fisher-Yates with mt19937_64, whose output the standard fixes (std::shuffle's use of
// it is not), so the order is the same with every standard library.
template <typename T>
void Shuffle(std::vector<T>* v, std::mt19937_64* rng) {
  for (size_t i = v->size(); i > 1; --i) {
    size_t j = static_cast<size_t>((*rng)() % i);
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

// Cuts length-sorted (ascending) samples into batches of at most max_tokens padded tokens.
void CutToBudget(const std::vector<uint32_t>& sorted, const std::vector<uint32_t>& lengths,
                 int64_t max_tokens, BatchPlan* out) {
  std::vector<uint32_t> batch;
  for (uint32_t i : sorted) {
    const int64_t longest = std::max<int64_t>(lengths[i], 1);
    if (!batch.empty() && static_cast<int64_t>(batch.size() + 1) * longest > max_tokens) {
      out->push_back(std::move(batch));
      batch.clear();
    }
    batch.push_back(i);
  }
  if (!batch.empty()) out->push_back(std::move(batch));
}

void SortByLength(std::vector<uint32_t>* v, const std::vector<uint32_t>& lengths) {
  std::stable_sort(v->begin(), v->end(),
                   [&](uint32_t a, uint32_t b) { return lengths[a] < lengths[b]; });
}

int64_t PackedLength(uint32_t length, int64_t row_len) {
  return std::min<int64_t>(std::max<uint32_t>(length, 1), row_len);
}

// Next-fit: the rows (lists of samples, in order) that samples of these lengths fill, each
// at most row_len tokens (a sample is at most row_len long: it was truncated).
std::vector<std::vector<uint32_t>> PackRows(const std::vector<uint32_t>& order, const std::vector<uint32_t>& lengths,
                                            int64_t row_len) {
  std::vector<std::vector<uint32_t>> rows;
  int64_t used = row_len;  // no row open
  for (uint32_t i : order) {
    const int64_t n = PackedLength(lengths[i], row_len);
    if (used + n > row_len) {
      rows.emplace_back();
      used = 0;
    }
    rows.back().push_back(i);
    used += n;
  }
  return rows;
}

// Best-fit decreasing: samples, longest first (ties in `order`'s order), each go to the
// row whose free space fits them most tightly, or start a new row. Rows come back in the
// order they were started, their samples in the order they were placed; then next-fit
// (PackRows) over a run of consecutive rows rebuilds exactly those rows, because a row's
// first sample started it only when it fitted in no earlier row's free space, which only
// shrank afterwards. Collate relies on this.
std::vector<std::vector<uint32_t>> PackRowsBestFit(std::vector<uint32_t> order, const std::vector<uint32_t>& lengths,
                                                   int64_t row_len) {
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return PackedLength(lengths[a], row_len) > PackedLength(lengths[b], row_len);
  });
  std::vector<std::vector<uint32_t>> rows;
  std::multimap<int64_t, size_t> free_space;  // free tokens -> row (ties: the earlier row)
  for (uint32_t i : order) {
    const int64_t n = PackedLength(lengths[i], row_len);
    auto fit = free_space.lower_bound(n);
    size_t row;
    int64_t left;
    if (fit == free_space.end()) {
      row = rows.size();
      rows.emplace_back();
      left = row_len - n;
    } else {
      row = fit->second;
      left = fit->first - n;
      free_space.erase(fit);
    }
    rows[row].push_back(i);
    if (left > 0) free_space.emplace(left, row);
  }
  return rows;
}

// The epoch's batches in the global order that `world_size` ranks deal them (batch b of
// rank r is its r + b x world_size).
BatchPlan GlobalPlan(const std::vector<uint32_t>& lengths, const BatchPlanOptions& options, uint64_t seed,
                     int64_t epoch, int world_size) {
  std::mt19937_64 rng(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(epoch))));
  std::vector<uint32_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0u);
  Shuffle(&order, &rng);

  BatchPlan all;
  if (options.pack_len > 0) {
    const auto rows = PackRowsBestFit(order, lengths, options.pack_len);
    const size_t per_batch = static_cast<size_t>(std::max<int64_t>(
        1, options.max_tokens > 0 ? options.max_tokens / options.pack_len : options.batch_size));
    for (size_t r = 0; r < rows.size(); ++r) {
      if (r % per_batch == 0) all.emplace_back();
      all.back().insert(all.back().end(), rows[r].begin(), rows[r].end());
    }
    Shuffle(&all, &rng);  // rows stay in their order within a batch (see PackRowsBestFit)
  } else if (options.max_tokens <= 0) {
    const size_t bs = static_cast<size_t>(std::max<int64_t>(options.batch_size, 1));
    for (size_t i = 0; i < order.size(); i += bs)
      all.emplace_back(order.begin() + i, order.begin() + std::min(order.size(), i + bs));
  } else {
    const int64_t pool_tokens = options.max_tokens * std::max<int64_t>(options.pool_batches, 1);
    std::vector<uint32_t> pool;
    int64_t tokens = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      pool.push_back(order[k]);
      tokens += lengths[order[k]];
      if (tokens >= pool_tokens || k + 1 == order.size()) {
        SortByLength(&pool, lengths);
        CutToBudget(pool, lengths, options.max_tokens, &all);
        pool.clear();
        tokens = 0;
      }
    }
    Shuffle(&all, &rng);
  }

  const size_t world = static_cast<size_t>(std::max(world_size, 1));
  if (world == 1) return all;
  // Every rank needs the same number of batches. Rather than drop the remainder, split
  // the batch with the most samples (the first such) in two until the count divides,
  // so no sample is lost; only when every batch is a single sample does any remain.
  while (all.size() % world != 0) {
    auto most = std::max_element(all.begin(), all.end(),
                                 [](const auto& a, const auto& b) { return a.size() < b.size(); });
    if (most->size() < 2) break;
    const auto half = most->begin() + static_cast<std::ptrdiff_t>(most->size() / 2);
    std::vector<uint32_t> second(half, most->end());
    most->erase(half, most->end());
    all.insert(most + 1, std::move(second));
  }
  all.resize(all.size() / world * world);  // every batch one sample: the remainder is dropped
  return all;
}

}  // namespace

BatchPlan PlanEpoch(const std::vector<uint32_t>& lengths, const BatchPlanOptions& options,
                    uint64_t seed, int64_t epoch, int rank, int world_size) {
  BatchPlan all = GlobalPlan(lengths, options, seed, epoch, world_size);
  const size_t world = static_cast<size_t>(std::max(world_size, 1));
  const size_t per_rank = all.size() / world;
  BatchPlan mine;
  mine.reserve(per_rank);
  for (size_t b = 0; b < per_rank; ++b) mine.push_back(std::move(all[b * world + rank]));
  return mine;
}

int64_t BatchesDoneOnResize(const std::vector<uint32_t>& lengths, const BatchPlanOptions& options, uint64_t seed,
                            int64_t epoch, int from_world, int64_t done, int to_world) {
  const BatchPlan before = GlobalPlan(lengths, options, seed, epoch, std::max(from_world, 1));
  const BatchPlan after = GlobalPlan(lengths, options, seed, epoch, std::max(to_world, 1));
  std::vector<bool> trained(lengths.size(), false);
  size_t count = 0;
  for (size_t b = 0; b < std::min(before.size(), static_cast<size_t>(std::max<int64_t>(done, 0) * from_world)); ++b)
    for (uint32_t i : before[b]) {
      count += trained[i] ? 0 : 1;
      trained[i] = true;
    }
  size_t n = 0, covered = 0;
  for (; n < after.size() && covered < count; ++n)
    for (uint32_t i : after[n]) {
      if (!trained[i]) return -1;  // a batch that straddles what was trained and what was not
      ++covered;
    }
  if (covered != count || n % static_cast<size_t>(std::max(to_world, 1)) != 0) return -1;
  return static_cast<int64_t>(n) / std::max(to_world, 1);
}

BatchPlan PlanEval(const std::vector<uint32_t>& lengths, const BatchPlanOptions& options) {
  std::vector<uint32_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0u);
  SortByLength(&order, lengths);
  BatchPlan plan;
  if (options.max_tokens > 0) {
    CutToBudget(order, lengths, options.max_tokens, &plan);
  } else {
    const size_t bs = static_cast<size_t>(std::max<int64_t>(options.batch_size, 1));
    for (size_t i = 0; i < order.size(); i += bs)
      plan.emplace_back(order.begin() + i, order.begin() + std::min(order.size(), i + bs));
  }
  return plan;
}

Batch Collate(const format::ShardReader& shard, const std::vector<uint32_t>& indices,
              int64_t max_len, int64_t pad_id, bool packed) {
  std::vector<uint32_t> lengths_of(indices.size());
  std::vector<std::vector<uint32_t>> rows;  // positions in `indices`
  std::vector<uint32_t> order(indices.size());
  std::iota(order.begin(), order.end(), 0u);
  for (size_t k = 0; k < indices.size(); ++k)
    lengths_of[k] = static_cast<uint32_t>(std::min<uint64_t>(shard.length(indices[k]), max_len));
  if (packed) rows = PackRows(order, lengths_of, max_len);
  else for (uint32_t k : order) rows.push_back({k});
  const bool lm = shard.header().num_classes == 0;
  const int64_t b = static_cast<int64_t>(rows.size());
  int64_t l = 1;
  for (const auto& row : rows) {
    int64_t n = 0;
    for (uint32_t k : row) n += lengths_of[k];
    l = std::max(l, n);
  }
  Batch batch;
  batch.tokens = torch::full({b, l}, pad_id, torch::kLong);
  batch.pad_mask = torch::ones({b, l}, torch::kBool);
  batch.labels = torch::empty({b}, torch::kLong);
  if (lm) batch.target_mask = torch::zeros({b, l}, torch::kBool);
  if (packed) {
    batch.segments = torch::full({b, l}, int64_t{-1}, torch::kLong);  // padding: a segment of its own
    batch.positions = torch::zeros({b, l}, torch::kLong);
  }
  int64_t* tok = batch.tokens.data_ptr<int64_t>();
  bool* pad = batch.pad_mask.data_ptr<bool>();
  int64_t* lab = batch.labels.data_ptr<int64_t>();
  bool* target = lm ? batch.target_mask.data_ptr<bool>() : nullptr;
  int64_t* seg = packed ? batch.segments.data_ptr<int64_t>() : nullptr;
  int64_t* pos = packed ? batch.positions.data_ptr<int64_t>() : nullptr;
  for (int64_t r = 0; r < b; ++r) {
    int64_t c = r * l;
    for (size_t s = 0; s < rows[r].size(); ++s) {
      const uint32_t i = indices[rows[r][s]];
      const int64_t n = lengths_of[rows[r][s]];
      const int64_t prompt = std::max<int32_t>(shard.label(i), 1);  // LM: tokens not predicted
      const int32_t* src = shard.tokens(i);
      for (int64_t t = 0; t < n; ++t, ++c) {
        tok[c] = src[t];
        pad[c] = false;
        if (target) target[c] = t >= prompt;
        if (seg) seg[c] = static_cast<int64_t>(s), pos[c] = t;
      }
      batch.real_tokens += n;
    }
    pad[r * l] = false;  // never mask a whole row (an empty sample would give NaN)
    lab[r] = shard.label(indices[rows[r][0]]);
  }
  batch.padded_tokens = b * l;
  batch.samples = static_cast<int64_t>(indices.size());
  return batch;
}

}  // namespace nightshift::trainer
