// Metrics end to end: promtool accepts every daemon's /metrics, and a real Prometheus
// (Debian's package) scraping a coordinator and a worker that runs a job answers every
// query of the Grafana dashboards in deploy/grafana/dashboards with at least one series.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "common/format/step_metrics.h"
#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

std::vector<std::string> DashboardQueries() {
  std::vector<std::string> exprs;
  for (const auto& f : fs::directory_iterator(std::string(NIGHTSHIFT_SOURCE_DIR) + "/deploy/grafana/dashboards")) {
    std::ifstream in(f.path());
    nlohmann::json d = nlohmann::json::parse(in);
    for (const auto& panel : d["panels"])
      for (const auto& target : panel["targets"])
        exprs.push_back(std::regex_replace(target["expr"].get<std::string>(), std::regex("\\$job"), ".+"));
  }
  return exprs;
}

// Every trainer series a dashboard queries is one the worker exports from the one table
// of step metrics (or the last checkpoint's gauges).
TEST(MetricsE2E, DashboardTrainerSeriesComeFromTheStepMetricsTable) {
  std::set<std::string> exported = {"nightshift_trainer_checkpoint_seconds", "nightshift_trainer_checkpoint_bytes",
                                    "nightshift_trainer_checkpoint_step"};
  for (const format::StepMetric& m : format::kStepMetrics)
    if (m.prometheus != nullptr) exported.insert(m.prometheus);
  const std::regex series("nightshift_trainer_[a-z_]+");
  int seen = 0;
  for (const std::string& expr : DashboardQueries()) {
    for (auto it = std::sregex_iterator(expr.begin(), expr.end(), series); it != std::sregex_iterator(); ++it) {
      ++seen;
      EXPECT_TRUE(exported.count(it->str())) << it->str() << " in " << expr;
    }
  }
  EXPECT_GT(seen, 5);
}

TEST(MetricsE2E, PromtoolAndPrometheusSeeEveryDashboardSeries) {
  Cluster cluster("metrics");
  const std::string data = cluster.MakeData(150);
  cluster.StartCoordinator({"--metrics-listen", "127.0.0.1:0", "--metrics-port-file", cluster.dir() + "/cm.port"});
  cluster.StartWorker("w1", 1, {}, {"--metrics-listen", "127.0.0.1:0", "--metrics-port-file", cluster.dir() + "/wm.port"});
  const int coordinator_port = cluster.ReadPortFile(cluster.dir() + "/cm.port");
  const int worker_port = cluster.ReadPortFile(cluster.dir() + "/wm.port");
  ASSERT_GT(coordinator_port, 0);
  ASSERT_GT(worker_port, 0);

  v1::Job job;
  ASSERT_TRUE(cluster.Submit("model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 48}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 500, batching: {batch_size: 8}, threads: 1}\n"
                             "checkpoint: {every_steps: 5}\n", &job).ok());
  // Wait until the trainer reports steps and has written a checkpoint.
  v1::Job now;
  for (int i = 0; i < 600 && !(now.progress().step() > 0 && now.checkpoint_step() > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cluster.Get(job.id(), &now);
  }
  ASSERT_EQ(now.state(), v1::RUNNING) << now.reason();

  std::string out;
  for (int port : {coordinator_port, worker_port}) {
    const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
    EXPECT_EQ(Cluster::Shell("curl -sf " + url + " | promtool check metrics", &out), 0) << url << ": " << out;
    EXPECT_EQ(out, "") << url;  // no lint problems
  }
  ASSERT_EQ(Cluster::Shell("curl -sf http://127.0.0.1:" + std::to_string(worker_port) + "/metrics", &out), 0);
  EXPECT_NE(out.find("nightshift_trainer_tokens_per_second{job=\"" + job.id() + "\",rank=\"0\"}"),
            std::string::npos) << out;

  // A real Prometheus, scraping both every second.
  const int prom_port = FreePort();
  const std::string prom_dir = cluster.dir() + "/prometheus";
  fs::create_directories(prom_dir);
  std::ofstream(prom_dir + "/prometheus.yml")
      << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
         "scrape_configs:\n"
         "  - job_name: nightshift-coordinator\n"
         "    static_configs: [{targets: ['127.0.0.1:" << coordinator_port << "']}]\n"
         "  - job_name: nightshift-worker\n"
         "    static_configs: [{targets: ['127.0.0.1:" << worker_port << "']}]\n";
  Process prometheus({"/usr/bin/prometheus", "--config.file=" + prom_dir + "/prometheus.yml",
                      "--storage.tsdb.path=" + prom_dir + "/data", "--web.listen-address=127.0.0.1:" +
                      std::to_string(prom_port)},
                     prom_dir + "/prometheus.log");
  const std::string api = "http://127.0.0.1:" + std::to_string(prom_port);
  bool ready = false;
  for (int i = 0; i < 150 && !ready; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ready = Cluster::Shell("curl -sf " + api + "/-/ready", &out) == 0;
  }
  ASSERT_TRUE(ready) << "prometheus did not start; see " << prom_dir << "/prometheus.log";

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (const std::string& expr : DashboardQueries()) {
    size_t series = 0;
    while (series == 0 && std::chrono::steady_clock::now() < deadline) {
      Cluster::Shell("curl -sf -G " + api + "/api/v1/query --data-urlencode 'query=" + expr + "'", &out);
      nlohmann::json r = nlohmann::json::parse(out, nullptr, false);
      if (r.is_object() && r.value("status", "") == "success") series = r["data"]["result"].size();
      if (series == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    EXPECT_GT(series, 0u) << "no series for dashboard query: " << expr << "\nlast answer: " << out;
  }
  prometheus.Kill(SIGTERM);
}

}  // namespace
}  // namespace nightshift::testing_e2e
