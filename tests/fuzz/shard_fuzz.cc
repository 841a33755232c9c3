// ShardReader::Open on arbitrary file contents: a truncated or corrupt shard must be an
// error, never a crash or an out-of-bounds read, and a shard that opens must be readable
// end to end.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/format/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/nightshift-shard-fuzz-" + std::to_string(::getpid()) + ".shard";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  for (bool verify : {false, true}) {
    nightshift::format::ShardReader reader;
    if (!reader.Open(path, verify).empty()) continue;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < reader.num_samples(); ++i) {
      sum += static_cast<uint64_t>(reader.label(i)) + reader.id(i);
      for (uint64_t t = 0; t < reader.length(i); ++t) sum += static_cast<uint64_t>(reader.tokens(i)[t]);
    }
    if (sum == 0x5eed) std::fprintf(stderr, " ");  // keep the reads
  }
  return 0;
}
