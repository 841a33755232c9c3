// Limits: how large each string and list that a client or a worker sends may be, all in
// one place, checked once where it enters the coordinator (the Coordinator's entry
// points), so that nobody can grow the job store or the coordinator's memory by sending
// more. gRPC's own bound (4 MiB per message) is far too loose for what is kept per job,
// per event and per worker. Sizes are in bytes (UTF-8), counts in entries.
//
// Everything over a limit is refused with INVALID_ARGUMENT naming the field, except a
// task's error message, which is truncated (TruncateTaskError): a worker retries a
// final report until it is acknowledged, so refusing a failure with a long message would
// leave the job waiting forever; its first few KiB say what went wrong.
//
// The job spec has its own limits (1 MiB in all, and common/spec_rules/spec_rules.h).
#ifndef NIGHTSHIFT_COORDINATOR_LIMITS_H_
#define NIGHTSHIFT_COORDINATOR_LIMITS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "nightshift/v1/admin.pb.h"
#include "nightshift/v1/cluster.pb.h"

namespace nightshift {
namespace limits {

// From clients.
constexpr size_t kJobIdBytes = 64;            // the coordinator's own are "j-" and digits
constexpr size_t kRequestIdBytes = 128;       // SubmitJobRequest.request_id
constexpr size_t kCancelReasonBytes = 4096;   // CancelJobRequest.reason, kept in the job's events
constexpr size_t kCacheKeyBytes = 256;        // EvictCache's key; TaskStatus.cache_key

// From workers.
constexpr size_t kWorkerNameBytes = 128;      // the name it registers and heartbeats as
constexpr size_t kAddressBytes = 256;         // HOST:PORT: log_address, master_addr
constexpr size_t kPathBytes = 4096;           // checkpoint_path, model_path, cache dirs (PATH_MAX)
constexpr size_t kDigestBytes = 64;           // a SHA-256 in hex: manifest digests
constexpr size_t kCheckpointCheckBytes = 2048;  // TaskStatus.checkpoint_check: one event's text
constexpr size_t kTaskErrorBytes = 4096;      // TaskStatus.error: longer ones are truncated
constexpr size_t kMetricNameBytes = 128;      // keys of TaskStatus.metrics and EvalPoint.metrics
constexpr int kMetricsPerReport = 256;        // entries of TaskStatus.metrics, of each EvalPoint
constexpr int kEvalsPerReport = 256;          // TaskStatus.evals (workers send the last 256)
constexpr int kTasksPerWorker = 4096;         // tasks in one registration or heartbeat
constexpr int kGpusPerWorker = 256;
constexpr size_t kGpuNameBytes = 256;
constexpr int kHeldCheckpoints = 100000;      // HeartbeatRequest.checkpoints: one per job folder
constexpr int kCacheEntries = 100000;         // CacheReport.entries

// What replaces the end of a truncated error: "... [truncated N bytes]".
constexpr char kTruncatedMarker[] = "... [truncated ";

}  // namespace limits

// OK, or INVALID_ARGUMENT "field: N bytes, more than the limit of M".
Status CheckSize(const std::string& field, const std::string& value, size_t max_bytes);

// A cancel reason (CancelJobRequest.reason).
Status CheckCancelReason(const std::string& reason);
// A job id a client names.
Status CheckJobId(const std::string& id);

// `error` cut to at most limits::kTaskErrorBytes, on a UTF-8 character boundary, its end
// replaced by kTruncatedMarker and the number of bytes dropped; unchanged when it fits.
std::string TruncateTaskError(std::string error);

// One task status from a worker (`field`: its name in messages, e.g. "tasks[2]"): every
// string and list checked, the error truncated.
Status LimitTaskStatus(const std::string& field, v1::TaskStatus* status);

// A worker's registration: name, log address, GPUs and the tasks it lists.
Status CheckWorkerInfo(const v1::WorkerInfo& worker);

// A heartbeat: the worker's name, every task status (limited as LimitTaskStatus does),
// its cache report (may be null) and the checkpoints it holds.
Status LimitHeartbeat(const std::string& name, std::vector<v1::TaskStatus>* tasks, const v1::CacheReport* cache,
                      const std::vector<v1::HeldCheckpoint>& checkpoints);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_LIMITS_H_
