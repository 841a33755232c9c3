// ParseManifest on arbitrary text: a checkpoint's manifest.json, read by the trainer to
// resume and by workers that serve and copy checkpoints. Errors are strings, never a
// crash. A version and attempt that parse are the document's numbers (the attempt fences
// older attempts: it must not wrap), every listed file has a plain name, and a current
// manifest written back parses to the same.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/format/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nightshift::format;
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckpointManifest m;
  if (!ParseManifest(text, &m).empty()) return 0;
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.contains("version") && doc["version"] != m.version) __builtin_trap();
  if (doc.contains("attempt") && doc["attempt"].is_number_integer() && doc["attempt"] != m.attempt) __builtin_trap();
  if (m.version > kCheckpointVersion) return 0;
  for (const auto& [name, f] : m.files)
    if (!IsPlainFileName(name)) __builtin_trap();
  if (m.version != kCheckpointVersion) return 0;
  CheckpointManifest back;
  if (!ParseManifest(ManifestText(m), &back).empty() || back.version != m.version || back.attempt != m.attempt ||
      back.fingerprint != m.fingerprint || back.position != m.position || back.files.size() != m.files.size())
    __builtin_trap();
  for (const auto& [name, f] : m.files)
    if (!back.files.count(name) || back.files[name].bytes != f.bytes || back.files[name].fnv1a64 != f.fnv1a64)
      __builtin_trap();
  return 0;
}
