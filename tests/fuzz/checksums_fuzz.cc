// ParseChecksums on arbitrary text: a model folder's checksums.json, which arrives from
// a user's init_from / pretrained folder or from a worker (JobService.GetArtifacts). It
// must be a Status for anything, never a crash, and what parses names only plain files
// inside the folder (never checksums.json itself) with a size and a digest that can be
// compared with a file's.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/model_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto sums = nightshift::ParseChecksums(std::string(reinterpret_cast<const char*>(data), size));
  if (!sums.ok()) return 0;
  for (const auto& [name, sum] : sums.value()) {
    if (!nightshift::IsPlainFileName(name) || name == nightshift::kChecksumsFile) __builtin_trap();
    if (sum.bytes < 0 || sum.hex.size() != (sum.algorithm == "sha1" ? 40u : 64u)) __builtin_trap();
    if (sum.algorithm != "sha256" && sum.algorithm != "sha1") __builtin_trap();
  }
  return 0;
}
