#include "common/format/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/io/atomic_file.h"

namespace nightshift::format {

uint64_t StableHash64(const void* data, size_t size, uint64_t seed) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

bool InValidationSplit(const std::string& sample_id, uint64_t seed, double fraction) {
  uint64_t h = StableHash64(&seed, sizeof(seed));
  h = StableHash64(sample_id.data(), sample_id.size(), h);
  // Finalizer (splitmix64) so nearby ids spread over the whole range.
  h ^= h >> 30; h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27; h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
  return u < fraction;
}

ShardWriter::ShardWriter(uint32_t vocab_size, uint32_t num_classes)
    : vocab_size_(vocab_size), num_classes_(num_classes) {}

void ShardWriter::Add(uint64_t id, int32_t label, const std::vector<int32_t>& tokens) {
  ids_.push_back(id);
  labels_.push_back(label);
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  offsets_.push_back(tokens_.size());
}

std::string ShardWriter::WriteFile(const std::string& path) const {
  std::string payload;
  auto append = [&payload](const void* p, size_t n) {
    payload.append(static_cast<const char*>(p), n);
  };
  append(offsets_.data(), offsets_.size() * sizeof(uint64_t));
  append(labels_.data(), labels_.size() * sizeof(int32_t));
  append(ids_.data(), ids_.size() * sizeof(uint64_t));
  append(tokens_.data(), tokens_.size() * sizeof(int32_t));

  ShardHeader h{};
  std::memcpy(h.magic, kShardMagic, sizeof(h.magic));
  h.version = kShardVersion;
  h.vocab_size = vocab_size_;
  h.num_samples = labels_.size();
  h.num_tokens = tokens_.size();
  h.num_classes = num_classes_;
  h.payload_checksum = StableHash64(payload.data(), payload.size());
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof(h));
  bytes += payload;
  return io::WriteFileAtomically(path, bytes);
}

ShardReader::~ShardReader() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

std::string ShardReader::Open(const std::string& path, bool verify_checksum) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot open shard " + path + ": " + std::strerror(errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return "cannot stat shard " + path + ": " + std::strerror(errno);
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < sizeof(ShardHeader)) {
    ::close(fd);
    return "shard " + path + " is truncated: " + std::to_string(size) +
           " bytes, smaller than its 64-byte header";
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return "cannot map shard " + path + ": " + std::strerror(errno);
  map_ = map;
  map_size_ = size;
  header_ = static_cast<const ShardHeader*>(map);
  const ShardHeader& h = *header_;
  if (std::memcmp(h.magic, kShardMagic, sizeof(h.magic)) != 0)
    return "shard " + path + " has a bad magic number (not a Nightshift token shard)";
  if (h.version != kShardVersion)
    return "shard " + path + " has version " + std::to_string(h.version) + ", expected " +
           std::to_string(kShardVersion);
  // Sizes are checked in a way that cannot overflow: each count is bounded by the
  // file size before it is multiplied.
  if (h.num_samples > size / 8 || h.num_tokens > size / 4)
    return "shard " + path + " is corrupt: sample or token count larger than the file";
  const uint64_t expected = sizeof(ShardHeader) + (h.num_samples + 1) * 8 + h.num_samples * 4 +
                            h.num_samples * 8 + h.num_tokens * 4;
  if (expected != size)
    return "shard " + path + " is truncated or corrupt: " + std::to_string(size) +
           " bytes, header implies " + std::to_string(expected);
  const char* base = static_cast<const char*>(map) + sizeof(ShardHeader);
  offsets_ = reinterpret_cast<const uint64_t*>(base);
  labels_ = reinterpret_cast<const int32_t*>(base + (h.num_samples + 1) * 8);
  ids_ = base + (h.num_samples + 1) * 8 + h.num_samples * 4;
  tokens_ = reinterpret_cast<const int32_t*>(base + (h.num_samples + 1) * 8 + h.num_samples * 12);
  if (offsets_[0] != 0 || offsets_[h.num_samples] != h.num_tokens)
    return "shard " + path + " is corrupt: offsets do not span the token array";
  for (uint64_t i = 0; i < h.num_samples; ++i) {
    if (offsets_[i + 1] < offsets_[i]) return "shard " + path + " is corrupt: offsets decrease";
  }
  if (verify_checksum) {
    uint64_t sum = StableHash64(base, size - sizeof(ShardHeader));
    if (sum != h.payload_checksum) return "shard " + path + " failed its checksum";
  }
  return "";
}

}  // namespace nightshift::format
