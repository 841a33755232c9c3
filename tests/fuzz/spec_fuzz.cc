// LoadJobSpec on arbitrary text: YAML or JSON from users, parsed by the coordinator.
// Must return a Status for anything, never crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // the coordinator takes up to 1 MiB; small inputs find more
  auto spec = nightshift::LoadJobSpec(std::string(reinterpret_cast<const char*>(data), size));
  if (spec.ok()) {
    // A spec that loads is valid and stays valid.
    nightshift::v1::JobSpec copy = spec.value();
    if (!nightshift::DefaultAndValidateJobSpec(&copy).ok()) __builtin_trap();
  }
  return 0;
}
