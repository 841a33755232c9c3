#include "worker/trainer/parallel/step_agreement.h"

#include <cmath>
#include <vector>

namespace nightshift::trainer {

OomVote StepAgreement::Vote(bool local_oom, bool local_unsplittable, double loss) {
  stats_ = SyncStats{};
  const bool not_finite = !local_oom && (intent_.poison_loss || !std::isfinite(loss));
  std::vector<bool> any = {local_oom, local_unsplittable, not_finite, intent_.stop, intent_.save};
  if (sync_ != nullptr) {
    if (local_oom) {
      sync_->Discard();
    } else {
      stats_ = sync_->Finish();
    }
    any = sync_->group().AnyRank(any);
  }
  decision_ = StepDecision{!any[2], any[3], any[4]};
  return OomVote{any[0], any[1]};
}

}  // namespace nightshift::trainer
