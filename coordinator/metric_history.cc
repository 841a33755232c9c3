#include "coordinator/metric_history.h"

#include <algorithm>

namespace nightshift {

v1::AttemptMetrics* AttemptOf(int attempt, v1::JobMetrics* m) {
  auto* attempts = m->mutable_attempts();
  for (auto& a : *attempts)
    if (a.attempt() == attempt) return &a;
  v1::AttemptMetrics* a = attempts->Add();
  a->set_attempt(attempt);
  a->set_stride(1);
  // Keep attempt order (a late report of an older attempt is rare but possible).
  for (int i = attempts->size() - 1; i > 0 && (*attempts)[i - 1].attempt() > attempt; --i) attempts->SwapElements(i, i - 1);
  for (auto& x : *attempts)
    if (x.attempt() == attempt) return &x;
  return nullptr;  // unreachable
}

bool AddTrainPoint(int attempt, const v1::Progress& p, int64_t time_ms, v1::JobMetrics* m) {
  if (p.step() <= 0) return false;  // "start": no loss yet
  v1::AttemptMetrics* a = AttemptOf(attempt, m);
  const int64_t stride = std::max<int64_t>(1, a->stride());
  if (a->train_size() > 0 && p.step() < a->train(a->train_size() - 1).step() + stride) return false;
  v1::TrainPoint* t = a->add_train();
  t->set_step(p.step());
  t->set_epoch(p.epoch());
  t->set_loss(p.loss());
  t->set_lr(p.lr());
  t->set_tokens_per_second(p.tokens_per_second());
  t->set_time_ms(time_ms);
  if (a->train_size() > kMaxTrainPoints) {
    auto* train = a->mutable_train();
    int kept = 0;
    for (int i = 0; i < train->size(); i += 2) train->SwapElements(kept++, i);
    train->DeleteSubrange(kept, train->size() - kept);
    a->set_stride(stride * 2);
  }
  return true;
}

bool AddEvals(int attempt, const google::protobuf::RepeatedPtrField<v1::EvalPoint>& evals, int64_t time_ms,
              v1::JobMetrics* m) {
  if (evals.empty()) return false;
  v1::AttemptMetrics* a = AttemptOf(attempt, m);
  bool changed = false;
  for (const auto& e : evals) {
    if (a->evals_size() >= kMaxEvalPoints) break;
    if (a->evals_size() > 0 && e.step() <= a->evals(a->evals_size() - 1).step()) continue;
    v1::EvalPoint* kept = a->add_evals();
    *kept = e;
    kept->set_time_ms(time_ms);
    changed = true;
  }
  return changed;
}

}  // namespace nightshift
