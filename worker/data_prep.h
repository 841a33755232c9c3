// Data preparation: reads the raw data of a job, trains a sentencepiece tokenizer on the
// training split, and writes token shards (common/format/shard.h) for the trainer.
// Results go to a directory named by a key of the inputs and options, so a second run
// on the same data and options reuses them.
//
// It runs in its own process, nightshift-prepare (worker/prepare_main.cc), started by
// the worker: Debian's libsentencepiece carries a private protobuf 3.14 that clashes
// with the protobuf 3.21 of gRPC in one process. So this library links no protobuf.
#ifndef NIGHTSHIFT_WORKER_DATA_PREP_H_
#define NIGHTSHIFT_WORKER_DATA_PREP_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace nightshift {

// What changes the output of preparation (the spec's data section, resolved).
struct PrepOptions {
  std::string path;                 // data.path; relative to the current directory
  std::string format = "text_dir";  // text_dir | jsonl
  std::string text_field = "text";  // jsonl
  std::string label_field;          // jsonl; empty for language models
  int64_t max_samples = 0;          // 0: all
  double validation_fraction = 0.2;
  uint64_t seed = 1234;             // picks the validation split
  int vocab_size = 8000;
  int max_len = 512;                // tokens kept per sample (bos included)
  bool classifier = true;           // false: language-model samples (bos ... eos)
};

struct PreparedData {
  std::string dir;            // holds tokenizer.model, train.shard, val.shard, meta.json
  std::string train_shard;
  std::string val_shard;
  int vocab_size = 0;         // actual sentencepiece vocabulary size
  std::vector<std::string> class_names;  // label id -> name (empty for language models)
  uint64_t train_samples = 0, val_samples = 0, train_tokens = 0;
  bool reused = false;        // found complete from an earlier run
  double seconds = 0;         // time spent (reading, tokenizer training, tokenizing)
};

// Special ids of every tokenizer we train.
inline constexpr int kPadId = 0, kUnkId = 1, kBosId = 2, kEosId = 3;

// data.path is resolved against the current directory when relative. A missing path
// or empty data is NOT_FOUND / INVALID_ARGUMENT naming the path (a user error).
// `threads` tokenizes files in parallel.
StatusOr<PreparedData> PrepareData(const PrepOptions& options, const std::string& cache_root, int threads);

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_DATA_PREP_H_
