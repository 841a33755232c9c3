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
  tokens_ = padded_tokens;
  probing_ = false;
  if (plan_.oom_above_tokens > 0 && padded_tokens > plan_.oom_above_tokens && !plan_.oom_in_backward)
    ThrowInjectedOutOfMemory(padded_tokens, plan_.oom_above_tokens);
}

void FaultInjector::BeforeProbe(int64_t padded_tokens) const {
  tokens_ = padded_tokens;
  probing_ = true;
}

void FaultInjector::InBackward() const {
  const int64_t limit = probing_ ? plan_.probe_oom_above_tokens : plan_.oom_above_tokens;
  if (plan_.oom_in_backward && limit > 0 && tokens_ > limit)
    ThrowInjectedOutOfMemory(tokens_, limit,
                             probing_ ? "NIGHTSHIFT_FAULT_OOM_IN_BACKWARD=1, NIGHTSHIFT_FAULT_PROBE_OOM_ABOVE_TOKENS"
                                      : "NIGHTSHIFT_FAULT_OOM_IN_BACKWARD=1, NIGHTSHIFT_FAULT_OOM_ABOVE_TOKENS");
}

void FaultInjector::AfterProbe(int64_t padded_tokens) const {
  if (plan_.probe_oom_above_tokens > 0 && padded_tokens > plan_.probe_oom_above_tokens && !plan_.oom_in_backward)
    ThrowInjectedOutOfMemory(padded_tokens, plan_.probe_oom_above_tokens, "NIGHTSHIFT_FAULT_PROBE_OOM_ABOVE_TOKENS");
}

void ThrowInjectedOutOfMemory(int64_t padded_tokens, int64_t limit, const char* variable) {
  throw c10::OutOfMemoryError(
      c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      "out of memory (fault injection: " + std::to_string(padded_tokens) + " padded tokens > " + variable + "=" +
          std::to_string(limit) + ")");
}

}  // namespace nightshift::trainer
