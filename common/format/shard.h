// Token shard: the contract between the worker's data preparation (writer) and the
// trainer (reader). One file per split. Standard library only.
//
// Layout, little-endian, no padding between sections:
//   ShardHeader                 (64 bytes)
//   offsets  uint64[num_samples + 1]   token offset of each sample; offsets[0] == 0,
//                                      offsets[num_samples] == num_tokens, non-decreasing
//   labels   int32[num_samples]        class id (classifiers); language models: the tokens of the
//                                      sample's prompt, not predicted (0 or -1: none; data.completion_field)
//   ids      uint64[num_samples]       StableHash64 of the sample's id (its file name)
//   tokens   int32[num_tokens]         token ids, each in [0, vocab_size)
// payload_checksum is StableHash64 over every byte after the header.
#ifndef NIGHTSHIFT_COMMON_FORMAT_SHARD_H_
#define NIGHTSHIFT_COMMON_FORMAT_SHARD_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace nightshift::format {

inline constexpr char kShardMagic[8] = {'N', 'S', 'S', 'H', 'A', 'R', 'D', '1'};
inline constexpr uint32_t kShardVersion = 1;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t vocab_size;
  uint64_t num_samples;
  uint64_t num_tokens;
  uint32_t num_classes;  // 0 for language-model data
  uint32_t reserved0;
  uint64_t payload_checksum;
  uint64_t reserved[2];
};
static_assert(sizeof(ShardHeader) == 64, "shard header is 64 bytes on disk");

// The most classes a classifier may have: data preparation refuses data with more
// distinct labels, the trainer a pretrained config.json with more.
inline constexpr uint32_t kMaxClasses = 10000;

// Accumulates samples in memory and writes them atomically (temporary file, fsync,
// rename, fsync of the directory).
class ShardWriter {
 public:
  ShardWriter(uint32_t vocab_size, uint32_t num_classes);
  void Add(uint64_t id, int32_t label, const std::vector<int32_t>& tokens);
  // Returns "" on success, else a message naming the file.
  std::string WriteFile(const std::string& path) const;
  uint64_t num_samples() const { return labels_.size(); }
  uint64_t num_tokens() const { return tokens_.size(); }

 private:
  uint32_t vocab_size_, num_classes_;
  std::vector<uint64_t> offsets_{0};
  std::vector<int32_t> labels_;
  std::vector<uint64_t> ids_;
  std::vector<int32_t> tokens_;
};

// A read-only, memory-mapped shard. Open() checks the header, the sizes and the
// offsets before anything is used, so a truncated or corrupt file is an error, never a
// crash. Not copyable; the mapping lives as long as the object.
class ShardReader {
 public:
  ShardReader() = default;
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // Returns "" on success. verify_checksum re-hashes the payload (reads the whole file).
  std::string Open(const std::string& path, bool verify_checksum);

  const ShardHeader& header() const { return *header_; }
  uint64_t num_samples() const { return header_->num_samples; }
  uint64_t length(uint64_t i) const { return offsets_[i + 1] - offsets_[i]; }
  const int32_t* tokens(uint64_t i) const { return tokens_ + offsets_[i]; }
  int32_t label(uint64_t i) const { return labels_[i]; }
  uint64_t id(uint64_t i) const {  // ids are 4-byte aligned only (after the int32 labels)
    uint64_t v;
    std::memcpy(&v, ids_ + i * sizeof(uint64_t), sizeof(v));
    return v;
  }

 private:
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const ShardHeader* header_ = nullptr;
  const uint64_t* offsets_ = nullptr;
  const int32_t* labels_ = nullptr;
  const char* ids_ = nullptr;
  const int32_t* tokens_ = nullptr;
};

// The special ids of every tokenizer nightshift-prepare trains: what the trainer and the
// predictors take when a prepared folder or an exported config.json names none.
inline constexpr int kPadId = 0, kUnkId = 1, kBosId = 2, kEosId = 3;

// FNV-1a, 64 bit: the same value in every process and on every run (unlike std::hash).
uint64_t StableHash64(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ULL);
inline uint64_t StableHash64(const std::string& s) { return StableHash64(s.data(), s.size()); }

// The validation split: a sample is in it when a seeded hash of its id falls below
// `fraction`. Pure function of (id, seed), so the worker (tokenizer training) and the
// trainer agree without talking, and a sample never changes side between runs.
bool InValidationSplit(const std::string& sample_id, uint64_t seed, double fraction);

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_SHARD_H_
