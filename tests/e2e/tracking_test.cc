// MLflow tracking end to end (issue 45): a real `mlflow server` (the pinned PyPI package,
// SQLite store) on 127.0.0.1, a coordinator with --mlflow-uri, a worker, real jobs. Each
// job is one run whose metric history equals `job metrics` (GetJobMetrics); the server
// stopped mid-job delays nothing, and the run is complete once it is back. Behind MLflow's
// basic-auth app, each user reads their own runs and no one else's.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/client.h"
#include "common/crypto/sha256.h"
#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

using json = nlohmann::json;

// `mlflow server` in a session of its own (it runs uvicorn as a child: stopping it stops
// the whole group).
class MlflowServer {
 public:
  // `admin_password` non-empty: MLflow's basic-auth app, every user denied what they were
  // not granted (default_permission NO_PERMISSIONS), its admin `admin`.
  MlflowServer(const std::string& dir, int port, const std::string& admin_password = "")
      : dir_(dir), port_(port), admin_password_(admin_password) {}
  ~MlflowServer() { Stop(); }
  bool Start() {
    fs::create_directories(dir_);
    std::vector<std::string> argv = {"/usr/bin/setsid", NIGHTSHIFT_PYTHON, "-m", "mlflow", "server", "--host",
                                     "127.0.0.1", "--port", std::to_string(port_), "--workers", "1",
                                     "--backend-store-uri", "sqlite:///" + dir_ + "/mlflow.db",
                                     "--default-artifact-root", dir_ + "/artifacts"};
    std::map<std::string, std::string> env;
    if (!admin_password_.empty()) {
      std::ofstream(dir_ + "/auth.ini") << "[mlflow]\ndefault_permission = NO_PERMISSIONS\n"
                                        << "database_uri = sqlite:///" << dir_ << "/auth.db\n"
                                        << "admin_username = admin\nadmin_password = " << admin_password_ << "\n"
                                        << "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n";
      argv.insert(argv.end(), {"--app-name", "basic-auth"});
      env = {{"MLFLOW_AUTH_CONFIG_PATH", dir_ + "/auth.ini"}, {"MLFLOW_FLASK_SERVER_SECRET_KEY", "test-only"}};
    }
    process_ = Process(argv, dir_ + "/mlflow.log", env);
    std::string out;
    for (int i = 0; i < 300; ++i) {
      if (Cluster::Shell("curl -s -o /dev/null " + url() + "/health", &out) == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }
  void Stop() {
    if (process_.pid() > 0) ::kill(-process_.pid(), SIGKILL);
    process_.Kill(SIGKILL);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // One REST call (as `user`:`password` when given; the admin on a basic-auth server);
  // null when it failed. `status`: the HTTP status.
  json Call(const std::string& method, const std::string& path, const json& body = nullptr, int* status = nullptr,
            const std::string& user_password = "") const {
    std::string cmd = "curl -s -w '\\n%{http_code}' -X " + method + " -H 'Content-Type: application/json' '" + url() +
                      (path[0] == '/' ? path : "/api/2.0/mlflow/" + path) + "'";
    if (!user_password.empty()) cmd += " -u '" + user_password + "'";
    else if (!admin_password_.empty()) cmd += " -u 'admin:" + admin_password_ + "'";
    if (!body.is_null()) {
      std::ofstream(dir_ + "/request.json") << body.dump();
      cmd += " -d @" + dir_ + "/request.json";
    }
    std::string out;
    if (Cluster::Shell(cmd, &out) != 0) return nullptr;
    const size_t cut = out.find_last_of('\n');
    const int code = cut == std::string::npos ? 0 : std::atoi(out.c_str() + cut + 1);
    if (status != nullptr) *status = code;
    if (code < 200 || code >= 300) return nullptr;
    return json::parse(out.substr(0, cut), nullptr, false);
  }
  // The run of job `id` in `experiment` (null when there is none yet).
  json RunOf(const std::string& id, const std::string& experiment = "nightshift/anonymous") const {
    json e = Call("GET", "experiments/get-by-name?experiment_name=" + experiment);
    if (e.is_null() || !e.contains("experiment")) return nullptr;
    json runs = Call("POST", "runs/search",
                     {{"experiment_ids", {e["experiment"]["experiment_id"]}},
                      {"filter", "tags.`nightshift.job_id` = '" + id + "'"}});
    if (runs.is_null() || !runs.contains("runs") || runs["runs"].empty()) return nullptr;
    EXPECT_EQ(runs["runs"].size(), 1u) << id;
    return runs["runs"][0];
  }
  // (step, value) of every point of `key`, in step order.
  std::vector<std::pair<int64_t, double>> History(const std::string& run_id, const std::string& key) const {
    json h = Call("GET", "metrics/get-history?run_id=" + run_id + "&metric_key=" + key + "&max_results=25000");
    std::vector<std::pair<int64_t, double>> points;
    if (!h.is_null() && h.contains("metrics"))
      for (const json& m : h["metrics"]) points.emplace_back(m["step"].get<int64_t>(), m["value"].get<double>());
    std::sort(points.begin(), points.end());
    return points;
  }

 private:
  const std::string dir_;
  const int port_;
  const std::string admin_password_;
  Process process_;
};

std::string Tag(const json& run, const std::string& key) {
  for (const json& t : run["data"].value("tags", json::array()))
    if (t["key"] == key) return t["value"];
  return "";
}

std::string Param(const json& run, const std::string& key) {
  for (const json& p : run["data"].value("params", json::array()))
    if (p["key"] == key) return p["value"];
  return "";
}

// A server behind MLflow's basic-auth app with `users` (password "<user>-password-1"), the
// coordinator's user "nightshift" among them, its file in dir/mlflow-user, and a token file
// dir/tokens for the Nightshift users `owners` ("<owner>-secret").
void MakeUsers(const Cluster& cluster, const MlflowServer& mlflow, const std::vector<std::string>& users,
               const std::vector<std::string>& owners) {
  for (const std::string& user : users)
    ASSERT_FALSE(mlflow.Call("POST", "users/create", {{"username", user}, {"password", user + "-password-1"}}).is_null())
        << user;
  std::ofstream(cluster.dir() + "/mlflow-user") << "nightshift:nightshift-password-1\n";
  std::ofstream tokens(cluster.dir() + "/tokens");
  for (const std::string& owner : owners) tokens << crypto::Sha256Hex(owner + "-secret") << " user " << owner << "\n";
}

// bob makes experiment `name` and lets the coordinator's MLflow user manage it; its id.
std::string Squat(const MlflowServer& mlflow, const std::string& name) {
  int made = 0;
  const json squatted = mlflow.Call("POST", "experiments/create", {{"name", name}}, &made, "bob:bob-password-1");
  EXPECT_EQ(made, 200);
  mlflow.Call("POST", "/api/3.0/mlflow/users/permissions/grant",
              {{"username", "nightshift"}, {"resource_type", "experiment"},
               {"resource_id", squatted.value("experiment_id", "")}, {"permission", "MANAGE"}},
              &made, "bob:bob-password-1");
  EXPECT_EQ(made, 200);
  return squatted.value("experiment_id", "");
}

// The job service as `user` ("<user>-secret").
std::unique_ptr<v1::JobService::Stub> StubOf(const Cluster& cluster, const std::string& user) {
  auto channel = MakeChannel(ClientOptions{cluster.address(), user + "-secret", "", "", "", ""});
  EXPECT_TRUE(channel.ok()) << channel.status().ToString();
  return channel.ok() ? v1::JobService::NewStub(*channel) : nullptr;
}

// Submits a job as `user` (never able to run: no worker needed for its run to be reported).
std::string SubmitAs(v1::JobService::Stub* stub, const std::string& user) {
  v1::SubmitJobRequest req;
  req.set_spec_yaml("name: " + user + "s\nmodel: {arch: transformer_classifier}\ndata: {path: /nonexistent}\n");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Job job;
  const grpc::Status s = stub->SubmitJob(&ctx, req, &job);
  EXPECT_TRUE(s.ok()) << user << ": " << s.error_message();
  EXPECT_EQ(job.owner(), user);
  return job.id();
}

// Job `id` once its run was given up (tracked_run.error set), or as it is after 10 s.
v1::Job GivenUp(v1::JobService::Stub* stub, const std::string& id) {
  return PollJob([&](v1::Job* job) { return GetJobFrom(stub, id, job); }, 10,
                 [](const v1::Job& job) { return !job.tracked_run().error().empty(); });
}

// The runs of experiment `id` (the admin's view).
size_t RunsIn(const MlflowServer& mlflow, const std::string& id) {
  json found = mlflow.Call("POST", "runs/search", {{"experiment_ids", {id}}});
  EXPECT_FALSE(found.is_null());
  return found.is_null() ? 0 : found.value("runs", json::array()).size();
}

TEST(TrackingE2E, EveryJobIsARunEqualToItsMetricsAndAServerDownDelaysNothing) {
  Cluster cluster("tracking");
  const std::string data = cluster.MakeData(150);
  MlflowServer mlflow(cluster.dir() + "/mlflow", FreePort());
  ASSERT_TRUE(mlflow.Start()) << "mlflow server did not start; see " << cluster.dir() << "/mlflow/mlflow.log";
  cluster.StartCoordinator({"--mlflow-uri", mlflow.url() + "/", "--mlflow-poll-seconds", "0.5"});
  cluster.StartWorker("w1", 1);

  v1::Job job;
  ASSERT_TRUE(cluster.Submit("name: tracked\n"
                             "model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 48}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 500, max_steps: 8000, lr: 0.002, batching: {batch_size: 8}, threads: 1}\n"
                             "eval: {every_steps: 500}\n"
                             "checkpoint: {every_steps: 500}\n", &job).ok());
  // The run appears while the job runs, with its first points.
  json run;
  for (int i = 0; i < 600; ++i) {
    run = mlflow.RunOf(job.id());
    if (!run.is_null() && !mlflow.History(run["info"]["run_id"], "loss").empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(run.is_null()) << "no run for " << job.id() << "; see " << cluster.dir() << "/coordinator.log";
  const std::string run_id = run["info"]["run_id"];
  EXPECT_EQ(run["info"]["run_name"], "tracked");
  EXPECT_EQ(run["info"]["status"], "RUNNING");

  // The server goes away mid-job: the job goes on and finishes as if nothing happened.
  mlflow.Stop();
  v1::Job now;
  ASSERT_TRUE(cluster.Get(job.id(), &now).ok());
  ASSERT_EQ(now.state(), v1::RUNNING) << "the job ended before the server was stopped: make it longer";
  const int64_t step_at_stop = now.progress().step();
  v1::Job done = cluster.WaitForEnd(job.id(), 300);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << " " << done.error();
  EXPECT_GT(done.progress().step(), step_at_stop);
  // And a second job, cancelled while the server is down.
  v1::Job cancelled;
  ASSERT_TRUE(cluster.Submit("name: cancelled\n"
                             "model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 48}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 500, batching: {batch_size: 8}, threads: 1}\n", &cancelled).ok());
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_id(cancelled.id());
    v1::Job reply;
    ASSERT_TRUE(cluster.jobs()->CancelJob(&ctx, req, &reply).ok());
  }
  ASSERT_EQ(cluster.WaitForEnd(cancelled.id(), 60).state(), v1::CANCELLED);
  EXPECT_NE(ReadAll(cluster.dir() + "/coordinator.log").find("coordinator: MLflow:"), std::string::npos)
      << "the outage was not logged";

  // Back (same port, same store): both runs are completed.
  ASSERT_TRUE(mlflow.Start());
  for (int i = 0; i < 600; ++i) {
    run = mlflow.RunOf(job.id());
    json other = mlflow.RunOf(cancelled.id());
    if (!run.is_null() && run["info"]["status"] == "FINISHED" && !other.is_null() &&
        other["info"]["status"] == "KILLED")
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(run["info"]["status"], "FINISHED") << run.dump();
  EXPECT_EQ(mlflow.RunOf(cancelled.id())["info"]["status"], "KILLED");
  EXPECT_EQ(Tag(run, "nightshift.state"), "SUCCEEDED");
  EXPECT_EQ(Tag(run, "nightshift.model"), done.model().worker() + ":" + done.model().path());
  EXPECT_EQ(Param(run, "train.lr"), "0.002");
  std::string described;
  ASSERT_EQ(cluster.Cli({"job", "describe", job.id()}, &described), 0) << described;
  EXPECT_NE(described.find("MLflow:     run " + run_id + " in experiment " + run["info"]["experiment_id"].get<std::string>() +
                           ", complete"),
            std::string::npos)
      << described;
  EXPECT_EQ(Param(run, "eval.every_steps"), "500");

  // Its history equals the job's metrics, point for point: MLflow keeps every point the
  // coordinator took, `job metrics` at most kMaxTrainPoints a curve (then every other one
  // is dropped, stride > 1), so past that the job's points are a subset of the run's.
  v1::JobMetrics metrics;
  {
    grpc::ClientContext ctx;
    v1::GetJobMetricsRequest req;
    req.set_id(job.id());
    ASSERT_TRUE(cluster.jobs()->GetJobMetrics(&ctx, req, &metrics).ok());
  }
  ASSERT_EQ(metrics.attempts_size(), 1);
  std::vector<std::pair<int64_t, double>> loss, val_loss, val_accuracy;
  for (const v1::AttemptMetrics& a : metrics.attempts()) {
    for (const v1::TrainPoint& t : a.train()) loss.emplace_back(t.step(), t.loss());
    for (const v1::EvalPoint& e : a.evals()) {
      val_loss.emplace_back(e.step(), e.metrics().at("val_loss"));
      val_accuracy.emplace_back(e.step(), e.metrics().at("val_accuracy"));
    }
  }
  ASSERT_GE(loss.size(), 5u);
  ASSERT_GE(val_loss.size(), 15u);  // every 500 steps of 8,000
  EXPECT_LE(loss.front().first, step_at_stop);  // points from before the outage...
  EXPECT_GT(loss.back().first, step_at_stop);   // ...and after it
  const std::vector<std::pair<int64_t, double>> tracked = mlflow.History(run_id, "loss");
  if (metrics.attempts(0).stride() == 1) {
    EXPECT_EQ(tracked, loss);
  } else {
    for (const auto& point : loss)
      EXPECT_TRUE(std::binary_search(tracked.begin(), tracked.end(), point)) << point.first;
  }
  EXPECT_EQ(mlflow.History(run_id, "val_loss"), val_loss);
  EXPECT_EQ(mlflow.History(run_id, "val_accuracy"), val_accuracy);
}

// Behind MLflow's basic-auth app: the coordinator's own MLflow user (not an admin) makes
// each owner's experiment and grants the owner's MLflow user READ there; alice reads her
// run and not bob's, bob his and not alice's, and a search over both experiments finds
// each only their own. carol has no MLflow account: her run is made all the same and
// shared with no one (the coordinator says so), and an unauthenticated caller reads none.
// bob made "nightshift/dave" before dave's first job, and let the coordinator's user
// manage it: dave's run is given up (the experiment has no seal of this coordinator's),
// not put in bob's experiment.
TEST(TrackingE2E, EachUserReadsTheirOwnRunsOnlyBehindMlflowsBasicAuth) {
  Cluster cluster("tracking-auth");
  MlflowServer mlflow(cluster.dir() + "/mlflow", FreePort(), "admin-password-1");
  ASSERT_TRUE(mlflow.Start()) << "mlflow server did not start; see " << cluster.dir() << "/mlflow/mlflow.log";
  MakeUsers(cluster, mlflow, {"nightshift", "alice", "bob", "dave"}, {"alice", "bob", "carol", "dave"});
  const std::string squatted = Squat(mlflow, "nightshift/dave");
  cluster.StartCoordinator({"--token-file", cluster.dir() + "/tokens", "--mlflow-uri", mlflow.url(), "--mlflow-user-file",
                            cluster.dir() + "/mlflow-user", "--mlflow-owner-permission", "READ", "--mlflow-poll-seconds",
                            "0.3"});
  // No worker: a queued job is reported as well (a run RUNNING, with its params).
  std::map<std::string, std::string> job_of;
  std::map<std::string, std::unique_ptr<v1::JobService::Stub>> stub_of;
  for (const char* user : {"alice", "bob", "carol", "dave"}) {
    stub_of[user] = StubOf(cluster, user);
    ASSERT_NE(stub_of[user], nullptr);
    job_of[user] = SubmitAs(stub_of[user].get(), user);
  }
  std::map<std::string, json> run_of;
  for (int i = 0; i < 300 && run_of.size() < 3; ++i) {
    for (const char* user : {"alice", "bob", "carol"})
      if (!run_of.count(user)) {
        json run = mlflow.RunOf(job_of[user], "nightshift/" + std::string(user));
        if (!run.is_null()) run_of[user] = run;
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(run_of.size(), 3u) << "runs missing; see " << cluster.dir() << "/coordinator.log";
  const auto read = [&](const std::string& user, const std::string& owner) {
    int status = 0;
    mlflow.Call("GET", "runs/get?run_id=" + run_of[owner]["info"]["run_id"].get<std::string>(), nullptr, &status,
                user.empty() ? "" : user + ":" + user + "-password-1");
    return status;
  };
  EXPECT_EQ(read("alice", "alice"), 200);
  EXPECT_EQ(read("alice", "bob"), 403);
  EXPECT_EQ(read("bob", "bob"), 200);
  EXPECT_EQ(read("bob", "alice"), 403);
  EXPECT_EQ(read("alice", "carol"), 403);
  EXPECT_EQ(read("bob", "carol"), 403);
  EXPECT_EQ(mlflow.RunOf(job_of["carol"], "nightshift/carol").is_null(), false);  // the admin reads every run
  // A search over every experiment finds each user's own run only.
  json all_experiments = json::array();
  for (const char* user : {"alice", "bob", "carol"}) all_experiments.push_back(run_of[user]["info"]["experiment_id"]);
  for (const char* user : {"alice", "bob"}) {
    int status = 0;
    json found = mlflow.Call("POST", "runs/search", {{"experiment_ids", all_experiments}}, &status,
                             std::string(user) + ":" + user + "-password-1");
    ASSERT_EQ(status, 200) << user;
    ASSERT_EQ(found.value("runs", json::array()).size(), 1u) << user << ": " << found.dump();
    EXPECT_EQ(found["runs"][0]["info"]["run_id"], run_of[user]["info"]["run_id"]) << user;
  }
  int status = 0;
  mlflow.Call("GET", "runs/get?run_id=" + run_of["alice"]["info"]["run_id"].get<std::string>(), nullptr, &status,
              "nobody:wrong");
  EXPECT_EQ(status, 401);
  EXPECT_NE(ReadAll(cluster.dir() + "/coordinator.log").find("nightshift/carol is not shared with carol"),
            std::string::npos);
  EXPECT_EQ(Tag(run_of["alice"], "nightshift.owner"), "alice");

  // dave's run is given up, with the reason in his job; bob's experiment holds nothing.
  const v1::Job dave = GivenUp(stub_of["dave"].get(), job_of["dave"]);
  EXPECT_NE(dave.tracked_run().error().find("nightshift/dave was not made by this coordinator for dave"),
            std::string::npos)
      << dave.tracked_run().DebugString();
  EXPECT_TRUE(dave.tracked_run().run_id().empty());
  EXPECT_EQ(RunsIn(mlflow, squatted), 0u);
}

// Without --mlflow-owner-permission a squatted experiment is refused all the same: its
// maker (bob, MANAGE as its creator) would read erin's runs there. Erin's job is given up
// with the reason; frank's, in the experiment the coordinator made, is reported.
TEST(TrackingE2E, WithoutGrantsAnExperimentSomeoneElseMadeIsRefusedToo) {
  Cluster cluster("tracking-squat");
  MlflowServer mlflow(cluster.dir() + "/mlflow", FreePort(), "admin-password-1");
  ASSERT_TRUE(mlflow.Start()) << "mlflow server did not start; see " << cluster.dir() << "/mlflow/mlflow.log";
  MakeUsers(cluster, mlflow, {"nightshift", "bob"}, {"erin", "frank"});
  const std::string squatted = Squat(mlflow, "nightshift/erin");
  cluster.StartCoordinator({"--token-file", cluster.dir() + "/tokens", "--mlflow-uri", mlflow.url(), "--mlflow-user-file",
                            cluster.dir() + "/mlflow-user", "--mlflow-poll-seconds", "0.3"});
  auto erin = StubOf(cluster, "erin"), frank = StubOf(cluster, "frank");
  ASSERT_TRUE(erin != nullptr && frank != nullptr);
  const std::string erins = SubmitAs(erin.get(), "erin"), franks = SubmitAs(frank.get(), "frank");
  const v1::Job given_up = GivenUp(erin.get(), erins);
  EXPECT_NE(given_up.tracked_run().error().find("nightshift/erin was not made by this coordinator for erin"),
            std::string::npos)
      << given_up.tracked_run().DebugString();
  EXPECT_EQ(RunsIn(mlflow, squatted), 0u);
  json run;
  for (int i = 0; i < 100 && run.is_null(); ++i) {
    run = mlflow.RunOf(franks, "nightshift/frank");
    if (run.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(run.is_null()) << "frank's run; see " << cluster.dir() << "/coordinator.log";
}

}  // namespace
}  // namespace nightshift::testing_e2e
