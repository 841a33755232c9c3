#include "coordinator/limits.h"

namespace nightshift {
namespace {

Status CheckCount(const std::string& field, int count, int max) {
  if (count <= max) return Status::OK();
  return Status::InvalidArgument(field + ": " + std::to_string(count) + " entries, more than the limit of " +
                                 std::to_string(max));
}

// A map of metric names to values (TaskStatus.metrics, EvalPoint.metrics).
Status CheckMetrics(const std::string& field, const google::protobuf::Map<std::string, double>& metrics) {
  NS_RETURN_IF_ERROR(CheckCount(field, static_cast<int>(metrics.size()), limits::kMetricsPerReport));
  for (const auto& [name, value] : metrics) NS_RETURN_IF_ERROR(CheckSize(field + " name", name, limits::kMetricNameBytes));
  return Status::OK();
}

Status CheckCacheReport(const v1::CacheReport& cache) {
  NS_RETURN_IF_ERROR(CheckCount("cache.entries", cache.entries_size(), limits::kCacheEntries));
  for (const auto& e : cache.entries()) {
    NS_RETURN_IF_ERROR(CheckSize("cache.entries.key", e.key(), limits::kCacheKeyBytes));
    NS_RETURN_IF_ERROR(CheckSize("cache.entries.dir", e.dir(), limits::kPathBytes));
    NS_RETURN_IF_ERROR(CheckSize("cache.entries.data_path", e.data_path(), limits::kPathBytes));
  }
  return Status::OK();
}

}  // namespace

Status CheckSize(const std::string& field, const std::string& value, size_t max_bytes) {
  if (value.size() <= max_bytes) return Status::OK();
  return Status::InvalidArgument(field + ": " + std::to_string(value.size()) + " bytes, more than the limit of " +
                                 std::to_string(max_bytes));
}

Status CheckCancelReason(const std::string& reason) {
  return CheckSize("reason", reason, limits::kCancelReasonBytes);
}

Status CheckJobId(const std::string& id) { return CheckSize("id", id, limits::kJobIdBytes); }

std::string TruncateTaskError(std::string error) {
  if (error.size() <= limits::kTaskErrorBytes) return error;
  // Room for the marker and the count ("... [truncated 1234567 bytes]": under 48 bytes).
  size_t keep = limits::kTaskErrorBytes - 48;
  // Not inside a UTF-8 sequence: a proto3 string must stay valid UTF-8, or the stored
  // record would not parse again.
  while (keep > 0 && (static_cast<unsigned char>(error[keep]) & 0xC0) == 0x80) --keep;
  const size_t dropped = error.size() - keep;
  error.resize(keep);
  return error + limits::kTruncatedMarker + std::to_string(dropped) + " bytes]";
}

Status LimitTaskStatus(const std::string& field, v1::TaskStatus* s) {
  NS_RETURN_IF_ERROR(CheckSize(field + ".task.job_id", s->task().job_id(), limits::kJobIdBytes));
  NS_RETURN_IF_ERROR(CheckSize(field + ".checkpoint_path", s->checkpoint_path(), limits::kPathBytes));
  NS_RETURN_IF_ERROR(CheckSize(field + ".model_path", s->model_path(), limits::kPathBytes));
  NS_RETURN_IF_ERROR(CheckSize(field + ".master_addr", s->master_addr(), limits::kAddressBytes));
  NS_RETURN_IF_ERROR(CheckSize(field + ".cache_key", s->cache_key(), limits::kCacheKeyBytes));
  NS_RETURN_IF_ERROR(CheckSize(field + ".checkpoint_manifest_sha256", s->checkpoint_manifest_sha256(),
                               limits::kDigestBytes));
  NS_RETURN_IF_ERROR(CheckSize(field + ".checkpoint_check", s->checkpoint_check(), limits::kCheckpointCheckBytes));
  NS_RETURN_IF_ERROR(CheckMetrics(field + ".metrics", s->metrics()));
  NS_RETURN_IF_ERROR(CheckCount(field + ".evals", s->evals_size(), limits::kEvalsPerReport));
  for (const auto& e : s->evals()) NS_RETURN_IF_ERROR(CheckMetrics(field + ".evals.metrics", e.metrics()));
  if (s->error().size() > limits::kTaskErrorBytes) s->set_error(TruncateTaskError(s->error()));
  return Status::OK();
}

Status CheckWorkerInfo(const v1::WorkerInfo& worker) {
  NS_RETURN_IF_ERROR(CheckSize("name", worker.name(), limits::kWorkerNameBytes));
  NS_RETURN_IF_ERROR(CheckSize("log_address", worker.log_address(), limits::kAddressBytes));
  NS_RETURN_IF_ERROR(CheckCount("gpus", worker.gpus_size(), limits::kGpusPerWorker));
  for (const auto& gpu : worker.gpus()) NS_RETURN_IF_ERROR(CheckSize("gpus.name", gpu.name(), limits::kGpuNameBytes));
  NS_RETURN_IF_ERROR(CheckCount("tasks", worker.tasks_size(), limits::kTasksPerWorker));
  for (const auto& t : worker.tasks()) NS_RETURN_IF_ERROR(CheckSize("tasks.job_id", t.job_id(), limits::kJobIdBytes));
  NS_RETURN_IF_ERROR(CheckSize("allocation.job_id", worker.allocation().job_id(), limits::kJobIdBytes));
  NS_RETURN_IF_ERROR(CheckSize("allocation.cluster_id", worker.allocation().cluster_id(), limits::kJobIdBytes));
  return Status::OK();
}

Status LimitHeartbeat(const std::string& name, std::vector<v1::TaskStatus>* tasks, const v1::CacheReport* cache,
                      const std::vector<v1::HeldCheckpoint>& checkpoints) {
  NS_RETURN_IF_ERROR(CheckSize("name", name, limits::kWorkerNameBytes));
  NS_RETURN_IF_ERROR(CheckCount("tasks", static_cast<int>(tasks->size()), limits::kTasksPerWorker));
  for (size_t i = 0; i < tasks->size(); ++i)
    NS_RETURN_IF_ERROR(LimitTaskStatus("tasks[" + std::to_string(i) + "]", &(*tasks)[i]));
  if (cache != nullptr) NS_RETURN_IF_ERROR(CheckCacheReport(*cache));
  NS_RETURN_IF_ERROR(CheckCount("checkpoints", static_cast<int>(checkpoints.size()), limits::kHeldCheckpoints));
  for (const auto& h : checkpoints) {
    NS_RETURN_IF_ERROR(CheckSize("checkpoints.job_id", h.job_id(), limits::kJobIdBytes));
    NS_RETURN_IF_ERROR(CheckSize("checkpoints.manifest_sha256", h.manifest_sha256(), limits::kDigestBytes));
  }
  return Status::OK();
}

}  // namespace nightshift
