// ParseProgressLine on arbitrary bytes: what a trainer (or anything holding its
// descriptor) writes to the worker. Errors are strings; nothing may crash. A parsed
// record formats to a line that parses back to the same record.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/format/progress.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nightshift::format::ProgressRecord;
  ProgressRecord r;
  std::string err = nightshift::format::ParseProgressLine(std::string(reinterpret_cast<const char*>(data), size), &r);
  if (!err.empty()) return 0;
  ProgressRecord again;
  if (!nightshift::format::ParseProgressLine(nightshift::format::FormatProgressLine(r), &again).empty())
    __builtin_trap();
  return 0;
}
