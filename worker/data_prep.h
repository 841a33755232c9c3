// Data preparation: reads the raw data of a job, trains a sentencepiece tokenizer on the
// training split, and writes token shards (common/format/shard.h) for the trainer, all
// into one output folder. Caching is the worker's business (feature_cache.h).
//
// It runs in its own process, nightshift-prepare (worker/prepare_main.cc), started by
// the worker: Debian's libsentencepiece carries a private protobuf 3.14 that clashes
// with the protobuf 3.21 of gRPC in one process. So this library links no protobuf.
#ifndef NIGHTSHIFT_WORKER_DATA_PREP_H_
#define NIGHTSHIFT_WORKER_DATA_PREP_H_

#include <string>
#include <vector>

#include "common/format/shard.h"
#include "common/status.h"
#include "worker/input_files.h"

namespace nightshift {

// Special ids of every tokenizer we train (one definition, in the shard format).
using format::kBosId, format::kEosId, format::kPadId, format::kUnkId;

// Files of a prepared folder. meta.json holds the trainer config's "data" section
// without the shard paths (the folder may move): vocab_size, num_classes, class_names,
// pad_id, bos_id, eos_id, and the counts below.
inline constexpr char kTrainShard[] = "train.shard";
inline constexpr char kValShard[] = "val.shard";
inline constexpr char kTokenizerModel[] = "tokenizer.model";
inline constexpr char kMetaFile[] = "meta.json";

struct PreparedData {
  int vocab_size = 0;                     // actual sentencepiece vocabulary size
  std::vector<std::string> class_names;   // label id -> name (empty for language models)
  uint64_t train_samples = 0, val_samples = 0, train_tokens = 0;
  std::vector<int64_t> length_histogram;  // samples with length in [2^i, 2^(i+1))
  uint64_t input_bytes = 0;               // bytes read from the inputs
  double seconds = 0;                     // in all; of which:
  double read_seconds = 0, tokenizer_seconds = 0, tokenize_seconds = 0;
};

// Builds into `output_dir` (created if needed). `threads` read and tokenize in parallel.
// A missing path or empty data is NOT_FOUND / INVALID_ARGUMENT naming the path.
StatusOr<PreparedData> PrepareData(const PrepOptions& options, const std::string& output_dir, int threads);

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_DATA_PREP_H_
