#include "worker/trainer/fault_injection.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace nightshift::trainer {

void FaultInjector::BeforeStep(int64_t step) const {
  if (plan_.abort_at_step == 0 || step != plan_.abort_at_step) return;
  std::fprintf(stderr, "fault injection: aborting at step %lld\n", static_cast<long long>(step));
  std::abort();
}

void FaultInjector::BeforeMicroBatch(int64_t padded_tokens) const {
  if (plan_.oom_above_tokens > 0 && padded_tokens > plan_.oom_above_tokens)
    ThrowInjectedOutOfMemory(padded_tokens, plan_.oom_above_tokens);
}

void FaultInjector::AfterProbe(int64_t padded_tokens) const {
  if (plan_.probe_oom_above_tokens > 0 && padded_tokens > plan_.probe_oom_above_tokens)
    ThrowInjectedOutOfMemory(padded_tokens, plan_.probe_oom_above_tokens, "NIGHTSHIFT_FAULT_PROBE_OOM_ABOVE_TOKENS");
}

void ThrowInjectedOutOfMemory(int64_t padded_tokens, int64_t limit, const char* variable) {
  throw c10::OutOfMemoryError(
      c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      "out of memory (fault injection: " + std::to_string(padded_tokens) + " padded tokens > " + variable + "=" +
          std::to_string(limit) + ")");
}

}  // namespace nightshift::trainer
