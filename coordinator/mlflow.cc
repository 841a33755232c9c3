#include "coordinator/mlflow.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace nightshift {

using json = nlohmann::json;

namespace {

constexpr char kApi[] = "/api/2.0/mlflow/";

json Pairs(const std::vector<MlflowPair>& pairs, size_t from, size_t n) {
  json out = json::array();
  for (size_t i = from; i < from + n; ++i) out.push_back({{"key", pairs[i].key}, {"value", pairs[i].value}});
  return out;
}

// MLflow serializes NaN and infinities as the strings it also accepts.
json MetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

}  // namespace

StatusOr<std::string> MlflowClient::Call(const std::string& method, const std::string& path, const std::string& body) {
  StatusOr<HttpResponse> r = api_->Call(method, path[0] == '/' ? path : kApi + path, body, timeout_seconds_);
  if (!r.ok()) return r.status();
  const int code = r->status;
  if (code >= 200 && code < 300) return r->body;
  const std::string where = "MLflow " + method + " " + path.substr(0, path.find('?')) + ": HTTP " + std::to_string(code);
  json error = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  std::string detail;
  if (error.is_object())
    detail = error.value("error_code", std::string()) + ": " + error.value("message", std::string());
  else
    detail = r->body.substr(0, 200);
  const std::string mlflow_code = error.is_object() ? error.value("error_code", "") : "";
  if (code == 401) return Status::Unauthenticated(where + " " + detail);
  if (code == 403) return Status::PermissionDenied(where + " " + detail);
  if (mlflow_code == "RESOURCE_DOES_NOT_EXIST") return Status::NotFound(where + " " + detail);
  // Only MLflow's own refusal of what we sent is about the run; anything else (a proxy's
  // page, a wrong --mlflow-uri's 404, 5xx, 429) is the server's state: try again later.
  if (code >= 400 && code < 500 && code != 429 && (mlflow_code == "INVALID_PARAMETER_VALUE" || mlflow_code == "BAD_REQUEST"))
    return Status::InvalidArgument(where + " " + detail);
  return Status::Unavailable(where + " " + detail + (code == 404 ? " (is --mlflow-uri the server's root?)" : ""));
}

StatusOr<MlflowExperiment> MlflowClient::Experiment(const std::string& name, const std::vector<MlflowPair>& tags) {
  StatusOr<std::string> got = Call("GET", "experiments/get-by-name?experiment_name=" + UrlEncode(name), "");
  if (got.ok()) {
    json j = json::parse(*got, nullptr, false);
    if (!j.is_object() || !j.contains("experiment") || !j["experiment"].is_object())
      return Status::Unavailable("MLflow experiments/get-by-name: an answer without an experiment");
    MlflowExperiment e{j["experiment"].value("experiment_id", std::string()), {}};
    for (const json& t : j["experiment"].value("tags", json::array()))
      if (t.is_object()) e.tags.push_back({t.value("key", ""), t.value("value", "")});
    return e;
  }
  if (got.status().code() != Status::kNotFound) return got.status();
  StatusOr<std::string> made = Call("POST", "experiments/create", json{{"name", name}, {"tags", Pairs(tags, 0, tags.size())}}.dump());
  if (!made.ok()) return made.status();
  json j = json::parse(*made, nullptr, false);
  if (!j.is_object() || !j.contains("experiment_id"))
    return Status::Unavailable("MLflow experiments/create: an answer without experiment_id");
  return MlflowExperiment{j["experiment_id"].get<std::string>(), tags};
}

Status MlflowClient::Grant(const std::string& experiment_id, const std::string& username,
                           const std::string& permission) {
  const json body = {{"username", username}, {"resource_type", "experiment"}, {"resource_id", experiment_id},
                     {"permission", permission}};
  StatusOr<std::string> got = Call("POST", "/api/3.0/mlflow/users/permissions/grant", body.dump());
  // A grant made before (by an earlier pass, or by hand) stays as it is.
  if (!got.ok() && got.status().message().find("RESOURCE_ALREADY_EXISTS") != std::string::npos) return Status::OK();
  return got.status();
}

StatusOr<std::string> MlflowClient::FindRun(const std::string& experiment_id, const std::string& key,
                                            const std::string& value) {
  // MLflow's filter grammar: a backquoted key, a single-quoted value.
  const json body = {{"experiment_ids", {experiment_id}},
                     {"filter", "tags.`" + key + "` = '" + value + "'"},
                     {"max_results", 1}};
  StatusOr<std::string> got = Call("POST", "runs/search", body.dump());
  if (!got.ok()) return got.status();
  json j = json::parse(*got, nullptr, false);
  if (!j.is_object() || !j.contains("runs") || j["runs"].empty()) return std::string();
  return j["runs"][0]["info"].value("run_id", std::string());
}

StatusOr<std::string> MlflowClient::CreateRun(const std::string& experiment_id, const std::string& run_name,
                                              int64_t start_time_ms, const std::vector<MlflowPair>& tags) {
  const json body = {{"experiment_id", experiment_id},
                     {"run_name", run_name},
                     {"start_time", start_time_ms},
                     {"tags", Pairs(tags, 0, tags.size())}};
  StatusOr<std::string> got = Call("POST", "runs/create", body.dump());
  if (!got.ok()) return got.status();
  json j = json::parse(*got, nullptr, false);
  if (!j.is_object() || !j.contains("run")) return Status::Unavailable("MLflow runs/create: an answer without a run");
  return j["run"]["info"].value("run_id", std::string());
}

Status MlflowClient::LogBatch(const std::string& run_id, const std::vector<MlflowMetric>& metrics,
                              const std::vector<MlflowPair>& params, const std::vector<MlflowPair>& tags) {
  size_t m = 0, p = 0, t = 0;
  while (m < metrics.size() || p < params.size() || t < tags.size()) {
    // At most 1000 entities a call: params and tags first, metrics fill the rest.
    const size_t np = std::min(params.size() - p, kMlflowBatchParams);
    const size_t nt = std::min(tags.size() - t, kMlflowBatchTags);
    const size_t nm = std::min(metrics.size() - m, kMlflowBatchMetrics - np - nt);
    json body = {{"run_id", run_id}, {"params", Pairs(params, p, np)}, {"tags", Pairs(tags, t, nt)}};
    json& ms = body["metrics"] = json::array();
    for (size_t i = m; i < m + nm; ++i)
      ms.push_back({{"key", metrics[i].key},
                    {"value", MetricValue(metrics[i].value)},
                    {"timestamp", metrics[i].timestamp_ms},
                    {"step", metrics[i].step}});
    StatusOr<std::string> got = Call("POST", "runs/log-batch", body.dump());
    if (!got.ok()) return got.status();
    m += nm;
    p += np;
    t += nt;
  }
  return Status::OK();
}

Status MlflowClient::EndRun(const std::string& run_id, const std::string& status, int64_t end_time_ms) {
  const json body = {{"run_id", run_id}, {"status", status}, {"end_time", end_time_ms}};
  StatusOr<std::string> got = Call("POST", "runs/update", body.dump());
  return got.ok() ? Status::OK() : got.status();
}

}  // namespace nightshift
