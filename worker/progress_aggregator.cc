#include "worker/progress_aggregator.h"

#include <cmath>

#include "common/time_util.h"

namespace nightshift {
namespace {

// A "start" or "step" record into the progress; counts the record lacks keep their value.
void ApplyProgress(const format::ProgressRecord& r, v1::Progress* p) {
  p->set_step(static_cast<int64_t>(r.Number("step", static_cast<double>(p->step()))));
  p->set_total_steps(static_cast<int64_t>(r.Number("total_steps", static_cast<double>(p->total_steps()))));
  p->set_epoch(static_cast<int32_t>(r.Number("epoch", p->epoch())));
  p->set_loss(r.Number("loss"));
  p->set_lr(r.Number("lr"));
  p->set_tokens_per_second(r.Number("tokens_per_second"));
  p->set_samples_per_second(r.Number("samples_per_second"));
  p->set_step_seconds(r.Number("step_seconds"));
  p->set_data_wait_seconds(r.Number("data_wait_seconds"));
  p->set_padding_efficiency(r.Number("padding_efficiency"));
  p->set_memory_allocated_bytes(static_cast<int64_t>(r.Number("memory_allocated_bytes")));
  p->set_memory_reserved_bytes(static_cast<int64_t>(r.Number("memory_reserved_bytes")));
  p->set_memory_peak_bytes(static_cast<int64_t>(r.Number("memory_peak_bytes")));
  p->set_host_rss_bytes(static_cast<int64_t>(r.Number("host_rss_bytes")));
  p->set_skipped_steps(static_cast<int64_t>(r.Number("skipped_steps")));
  p->set_oom_recoveries(static_cast<int64_t>(r.Number("oom_recoveries")));
  if (p->step() > 0 && p->total_steps() > p->step() && p->step_seconds() > 0)
    p->set_eta_seconds((p->total_steps() - p->step()) * p->step_seconds());
  *p->mutable_updated() = NowTimestamp();
}

}  // namespace

bool ProgressAggregator::Add(int rank, const format::ProgressRecord& r) {
  if (r.event == "error") last_errors_[rank] = r.String("message");
  if (r.event == "step") ranks_[rank].step = r;
  if (r.event == "checkpoint") ranks_[rank].checkpoint = r;
  if (rank != first_rank_) return false;
  if (r.event == "step" || r.event == "start") {
    ApplyProgress(r, &progress_);
    if (r.event == "start") resumed_step_ = static_cast<int64_t>(r.Number("resumed_step"));
  } else if (r.event == "checkpoint") {
    checkpoint_step_ = static_cast<int64_t>(r.Number("step"));
    checkpoint_path_ = r.String("path");
  } else if (r.event == "export") {
    model_path_ = r.String("path");
    model_step_ = static_cast<int64_t>(r.Number("step"));
  } else if (r.event == "eval" || r.event == "done") {
    v1::EvalPoint point;
    for (const auto& [k, v] : r.numbers) {  // NaN: not applicable (perplexity of a classifier)
      if ((k.rfind("val_", 0) == 0 || k == "train_seconds") && !std::isnan(v)) metrics_[k] = v;
      if (k.rfind("val_", 0) == 0 && !std::isnan(v)) (*point.mutable_metrics())[k] = v;
    }
    if (r.event == "done") stop_reason_ = r.String("stop_reason");
    if (r.event == "eval") {
      point.set_step(static_cast<int64_t>(r.Number("step")));
      point.set_epoch(static_cast<int32_t>(r.Number("epoch")));
      if (evals_.size() >= static_cast<size_t>(kMaxEvals)) evals_.erase(evals_.begin());
      evals_.push_back(std::move(point));
      ++evaluations_;
    }
  }
  return true;
}

void ProgressAggregator::Fill(v1::TaskStatus* status) const {
  // No progress before the first start or step: the coordinator keeps the job's own
  // (that of an earlier attempt, say) when a status has none.
  if (progress_.has_updated()) *status->mutable_progress() = progress_;
  status->set_checkpoint_step(checkpoint_step_);
  if (resumed_step_) status->set_resumed_step(*resumed_step_);
  status->set_checkpoint_path(checkpoint_path_);
  status->mutable_metrics()->clear();
  for (const auto& [k, v] : metrics_) (*status->mutable_metrics())[k] = v;
  status->clear_evals();
  for (const auto& e : evals_) *status->add_evals() = e;
  status->set_model_path(model_path_);
  status->set_model_step(model_step_);
  status->set_stop_reason(stop_reason_);
}

std::string ProgressAggregator::LastError(int rank) const {
  auto it = last_errors_.find(rank);
  return it == last_errors_.end() ? "" : it->second;
}

}  // namespace nightshift
