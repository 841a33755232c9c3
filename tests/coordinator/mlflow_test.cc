// coordinator/mlflow.h against an HttpApi that answers in memory: log-batch cut within
// MLflow's limits (1000 entities, 100 params, 100 tags a call), NaN as MLflow writes it,
// an experiment created when get-by-name finds none, and the server's answers mapped to
// errors (down, busy or not MLflow: UNAVAILABLE; a refusal: INVALID_ARGUMENT with MLflow's
// message).
// The real server: tests/e2e/tracking_test.cc.
#include "coordinator/mlflow.h"

#include <gtest/gtest.h>

#include <deque>

#include <nlohmann/json.hpp>

namespace nightshift {
namespace {

using nlohmann::json;

struct Call {
  std::string method, path;
  json body;
};

class FakeHttp : public HttpApi {
 public:
  StatusOr<HttpResponse> Call(const std::string& method, const std::string& path, const std::string& body,
                              double) override {
    calls.push_back({method, path, body.empty() ? json() : json::parse(body)});
    if (answers.empty()) return HttpResponse{200, "{}"};
    StatusOr<HttpResponse> a = answers.front();
    answers.pop_front();
    return a;
  }
  std::vector<nightshift::Call> calls;
  std::deque<StatusOr<HttpResponse>> answers;
};

TEST(MlflowClientTest, LogBatchIsCutWithinMlflowsLimitsAndSendsEverythingOnceInOrder) {
  FakeHttp http;
  MlflowClient client(&http);
  std::vector<MlflowMetric> metrics;
  for (int i = 0; i < 2500; ++i) metrics.push_back({"loss", 1.0 / (i + 1), 1000 + i, i});
  std::vector<MlflowPair> params, tags;
  for (int i = 0; i < 150; ++i) params.push_back({"p" + std::to_string(i), std::to_string(i)});
  for (int i = 0; i < 120; ++i) tags.push_back({"t" + std::to_string(i), "v"});
  ASSERT_TRUE(client.LogBatch("run1", metrics, params, tags).ok());
  size_t m = 0, p = 0, t = 0;
  for (const Call& c : http.calls) {
    EXPECT_EQ(c.method, "POST");
    EXPECT_EQ(c.path, "/api/2.0/mlflow/runs/log-batch");
    EXPECT_EQ(c.body["run_id"], "run1");
    const size_t nm = c.body["metrics"].size(), np = c.body["params"].size(), nt = c.body["tags"].size();
    EXPECT_LE(nm + np + nt, 1000u);
    EXPECT_LE(np, 100u);
    EXPECT_LE(nt, 100u);
    for (const json& x : c.body["metrics"]) {
      EXPECT_EQ(x["step"], static_cast<int64_t>(m));
      EXPECT_EQ(x["timestamp"], static_cast<int64_t>(1000 + m));
      EXPECT_DOUBLE_EQ(x["value"].get<double>(), 1.0 / (m + 1));
      ++m;
    }
    for (const json& x : c.body["params"]) EXPECT_EQ(x["key"], "p" + std::to_string(p++));
    for (const json& x : c.body["tags"]) EXPECT_EQ(x["key"], "t" + std::to_string(t++));
  }
  EXPECT_EQ(m, 2500u);
  EXPECT_EQ(p, 150u);
  EXPECT_EQ(t, 120u);
  EXPECT_EQ(http.calls.size(), 3u);  // 100+100+800, 50+20+930, 770
}

TEST(MlflowClientTest, NonFiniteValuesAreSentAsMlflowWritesThem) {
  FakeHttp http;
  MlflowClient client(&http);
  ASSERT_TRUE(client.LogBatch("r", {{"loss", std::nan(""), 1, 1}, {"loss", -INFINITY, 2, 2}}, {}, {}).ok());
  ASSERT_EQ(http.calls.size(), 1u);
  EXPECT_EQ(http.calls[0].body["metrics"][0]["value"], "NaN");
  EXPECT_EQ(http.calls[0].body["metrics"][1]["value"], "-Infinity");
}

TEST(MlflowClientTest, AnExperimentThatDoesNotExistIsCreated) {
  FakeHttp http;
  http.answers.push_back(HttpResponse{404, R"({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no"})"});
  http.answers.push_back(HttpResponse{200, R"({"experiment_id": "7"})"});
  StatusOr<MlflowExperiment> made = MlflowClient(&http).Experiment("my runs", {{"k", "v"}});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->id, "7");
  ASSERT_EQ(http.calls.size(), 2u);
  EXPECT_EQ(http.calls[0].path, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=my%20runs");
  EXPECT_EQ(http.calls[1].body["name"], "my runs");
  EXPECT_EQ(http.calls[1].body["tags"], json::array({{{"key", "k"}, {"value", "v"}}}));
  // Found: no create; its tags as the server has them.
  http.calls.clear();
  http.answers.push_back(
      HttpResponse{200, R"({"experiment": {"experiment_id": "3", "name": "x", "tags": [{"key": "a", "value": "b"}]}})"});
  StatusOr<MlflowExperiment> found = MlflowClient(&http).Experiment("x", {{"k", "v"}});
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->id, "3");
  ASSERT_EQ(found->tags.size(), 1u);
  EXPECT_EQ(found->tags[0].key, "a");
  EXPECT_EQ(found->tags[0].value, "b");
  EXPECT_EQ(http.calls.size(), 1u);
}

TEST(MlflowClientTest, AGrantGoesToTheBasicAuthAppsApiAndOneMadeBeforeStands) {
  FakeHttp http;
  MlflowClient client(&http);
  ASSERT_TRUE(client.Grant("4", "alice", "READ").ok());
  ASSERT_EQ(http.calls.size(), 1u);
  EXPECT_EQ(http.calls[0].method, "POST");
  EXPECT_EQ(http.calls[0].path, "/api/3.0/mlflow/users/permissions/grant");
  EXPECT_EQ(http.calls[0].body, json({{"username", "alice"}, {"resource_type", "experiment"}, {"resource_id", "4"},
                                      {"permission", "READ"}}));
  http.answers.push_back(HttpResponse{400, R"({"error_code": "RESOURCE_ALREADY_EXISTS", "message": "exists"})"});
  EXPECT_TRUE(client.Grant("4", "alice", "READ").ok());
  http.answers.push_back(HttpResponse{404, R"({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no user"})"});
  EXPECT_EQ(client.Grant("4", "carol", "READ").code(), Status::kNotFound);
  http.answers.push_back(HttpResponse{403, R"({"error_code": "PERMISSION_DENIED", "message": "no"})"});
  EXPECT_EQ(client.Grant("4", "alice", "READ").code(), Status::kPermissionDenied);
}

TEST(MlflowClientTest, AServerDownOrBusyIsUnavailableAndARefusalIsInvalidArgumentWithItsMessage) {
  FakeHttp http;
  MlflowClient client(&http);
  http.answers.push_back(Status::Unavailable("connection refused"));
  EXPECT_EQ(client.EndRun("r", "FINISHED", 5).code(), Status::kUnavailable);
  http.answers.push_back(HttpResponse{503, "<html>busy</html>"});
  EXPECT_EQ(client.EndRun("r", "FINISHED", 5).code(), Status::kUnavailable);
  http.answers.push_back(HttpResponse{429, "{}"});
  EXPECT_EQ(client.EndRun("r", "FINISHED", 5).code(), Status::kUnavailable);
  http.answers.push_back(HttpResponse{404, "<html>Not Found</html>"});  // a wrong --mlflow-uri, a proxy
  Status wrong = client.EndRun("r", "FINISHED", 5);
  EXPECT_EQ(wrong.code(), Status::kUnavailable);
  EXPECT_NE(wrong.message().find("--mlflow-uri"), std::string::npos) << wrong.message();
  http.answers.push_back(HttpResponse{404, R"({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "run r"})"});
  EXPECT_EQ(client.EndRun("r", "FINISHED", 5).code(), Status::kNotFound);
  http.answers.push_back(HttpResponse{403, R"({"error_code": "PERMISSION_DENIED", "message": "token"})"});
  EXPECT_EQ(client.EndRun("r", "FINISHED", 5).code(), Status::kPermissionDenied);
  http.answers.push_back(HttpResponse{401, "You are not authenticated."});
  EXPECT_EQ(client.EndRun("r", "FINISHED", 5).code(), Status::kUnauthenticated);
  http.answers.push_back(
      HttpResponse{400, R"({"error_code": "INVALID_PARAMETER_VALUE", "message": "Changing param values is not allowed"})"});
  Status s = client.LogBatch("r", {}, {{"a", "b"}}, {});
  EXPECT_EQ(s.code(), Status::kInvalidArgument);
  EXPECT_NE(s.message().find("INVALID_PARAMETER_VALUE: Changing param values is not allowed"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("runs/log-batch"), std::string::npos) << s.message();
}

TEST(MlflowClientTest, ARunIsFoundByItsTag) {
  FakeHttp http;
  http.answers.push_back(HttpResponse{200, R"({"runs": [{"info": {"run_id": "abc"}}]})"});
  http.answers.push_back(HttpResponse{200, "{}"});  // none
  MlflowClient client(&http);
  EXPECT_EQ(*client.FindRun("1", "nightshift.job_id", "j-000001"), "abc");
  EXPECT_EQ(http.calls[0].body["filter"], "tags.`nightshift.job_id` = 'j-000001'");
  EXPECT_EQ(http.calls[0].body["experiment_ids"], json({"1"}));
  EXPECT_EQ(*client.FindRun("1", "nightshift.job_id", "j-000002"), "");
}

}  // namespace
}  // namespace nightshift
