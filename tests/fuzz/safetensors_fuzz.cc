// ParseSafetensorsHeader on arbitrary bytes taken as a whole weight file (a user's
// model.pretrained or an init_from folder): what does not hold together must be an error,
// never a crash. A header that parses promises what readers rely on to map the file and
// take each tensor where it says: every tensor lies inside the file's data, in order and
// without overlap, and its bytes are exactly its dtype times its (non-negative) shape.
// Writing the tensors back gives a header that parses to the same tensors.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nightshift::format;
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  SafetensorsHeader h;
  if (!ParseSafetensorsHeader(file, size, &h).empty()) return 0;
  if (h.data_start < 8 || h.data_start > size) __builtin_trap();
  uint64_t at = h.data_start;
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin != at || t.end < t.begin || t.end > size) __builtin_trap();
    uint64_t bytes = DTypeSize(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0) __builtin_trap();
      bytes *= static_cast<uint64_t>(d);
    }
    if (bytes != t.end - t.begin) __builtin_trap();
    at = t.end;
  }
  if (at != size) __builtin_trap();

  std::vector<SafetensorsTensor> tensors = h.tensors;
  std::string again = SafetensorsHeaderBytes(&tensors, h.metadata);
  const uint64_t data_bytes = size - h.data_start;
  again.append(data_bytes, '\0');
  SafetensorsHeader back;
  if (!ParseSafetensorsHeader(again, again.size(), &back).empty() || back.tensors.size() != h.tensors.size() ||
      back.metadata != h.metadata)
    __builtin_trap();
  for (size_t i = 0; i < h.tensors.size(); ++i)
    if (back.tensors[i].name != h.tensors[i].name || back.tensors[i].shape != h.tensors[i].shape ||
        back.tensors[i].end - back.tensors[i].begin != h.tensors[i].end - h.tensors[i].begin)
      __builtin_trap();
  return 0;
}
