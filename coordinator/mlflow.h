// MLflow's tracking REST API (/api/2.0/mlflow/...), the calls the coordinator's reporting
// makes (coordinator/tracking.h): experiments by name, runs found by a tag or created,
// log-batch within MLflow's limits, runs/update. Over an HttpApi (libcurl in the daemon,
// a fake in unit tests, a real `mlflow server` in tests/coordinator/tracking_test.cc).
//
// Errors: 401 UNAUTHENTICATED (our credentials), 403 PERMISSION_DENIED (not allowed there); MLflow's RESOURCE_DOES_NOT_EXIST NOT_FOUND; a 4xx
// with MLflow's INVALID_PARAMETER_VALUE or BAD_REQUEST (a refusal of what was sent)
// INVALID_ARGUMENT with its error_code and message; anything else (no answer, 5xx, 429, a
// page that is not MLflow's JSON) UNAVAILABLE: the server's state, try again later.
#ifndef NIGHTSHIFT_COORDINATOR_MLFLOW_H_
#define NIGHTSHIFT_COORDINATOR_MLFLOW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/http_api.h"

namespace nightshift {

struct MlflowMetric {
  std::string key;
  double value = 0;
  int64_t timestamp_ms = 0;  // Unix ms. MLflow's SQL store keeps one row per (key, step,
                             // timestamp, value): sending a point again adds nothing
  int64_t step = 0;
};

struct MlflowPair {  // a param or a tag
  std::string key, value;
};

struct MlflowExperiment {
  std::string id;
  std::vector<MlflowPair> tags;  // as the server has them (or as made)
};

// MLflow's limits on one runs/log-batch call.
inline constexpr size_t kMlflowBatchMetrics = 1000, kMlflowBatchParams = 100, kMlflowBatchTags = 100;
inline constexpr size_t kMlflowParamValueBytes = 6000;  // longer values are cut (and marked)

class MlflowClient {
 public:
  // `api` is not owned and must outlive the client.
  explicit MlflowClient(HttpApi* api, double timeout_seconds = 10) : api_(api), timeout_seconds_(timeout_seconds) {}

  // Experiment `name`, created with `tags` when it does not exist.
  StatusOr<MlflowExperiment> Experiment(const std::string& name, const std::vector<MlflowPair>& tags = {});
  // MLflow's basic-auth app (`mlflow server --app-name basic-auth`, 3.x's
  // /api/3.0/mlflow/users/permissions/grant): MLflow user `username` gets `permission`
  // (READ, EDIT, MANAGE, NO_PERMISSIONS) on the experiment. Our user needs MANAGE there
  // (its creator has it). OK when that user already has a grant there (kept as it is);
  // NOT_FOUND when MLflow has no such user; PERMISSION_DENIED when ours may not grant; a
  // server without the basic-auth app answers 404: UNAVAILABLE, as any wrong path.
  Status Grant(const std::string& experiment_id, const std::string& username, const std::string& permission);
  // The id of the run of `experiment_id` whose tag `key` is `value`; "" when there is none.
  StatusOr<std::string> FindRun(const std::string& experiment_id, const std::string& key, const std::string& value);
  // A new RUNNING run; its id.
  StatusOr<std::string> CreateRun(const std::string& experiment_id, const std::string& run_name, int64_t start_time_ms,
                                  const std::vector<MlflowPair>& tags);
  // Everything given, in as many runs/log-batch calls as MLflow's limits need; stops at the
  // first refusal (what went before it stays logged).
  Status LogBatch(const std::string& run_id, const std::vector<MlflowMetric>& metrics,
                  const std::vector<MlflowPair>& params, const std::vector<MlflowPair>& tags);
  // runs/update: `status` FINISHED, FAILED or KILLED.
  Status EndRun(const std::string& run_id, const std::string& status, int64_t end_time_ms);

 private:
  // `path` under /api/2.0/mlflow/, or from the root when it starts with '/'; `body` "" for
  // a GET. The answer's JSON text.
  StatusOr<std::string> Call(const std::string& method, const std::string& path, const std::string& body);

  HttpApi* const api_;
  const double timeout_seconds_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_MLFLOW_H_
