// nightshift-worker: parses flags, runs the agent until SIGINT/SIGTERM.
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <thread>

#include "common/client.h"
#include "common/log.h"
#include "common/metrics.h"
#include "worker/agent.h"
#include "worker/gpu_inventory.h"
#include "worker/log_service.h"

#include <grpcpp/grpcpp.h>

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
}  // namespace

int main(int argc, char** argv) {
  using namespace nightshift;
  CLI::App app{"Nightshift worker: runs the ranks of jobs as nightshift-trainer processes"};
  WorkerOptions options;
  app.add_option("--coordinator", options.coordinator, "coordinator HOST:PORT")->required();
  app.add_option("--name", options.name, "this worker's unique name")->required();
  app.add_option("--token", options.token, "bearer token (role worker) for the coordinator");
  app.add_option("--token-file", options.token_file, "file whose first line is the token (else env NIGHTSHIFT_TOKEN)");
  app.add_option("--tls-ca", options.tls_ca, "PEM CA of the coordinator's certificate: connect with TLS");
  app.add_option("--tls-cert", options.tls_cert, "PEM certificate of this worker (mutual TLS)");
  app.add_option("--tls-key", options.tls_key, "PEM key of --tls-cert");
  app.add_option("--data-root", options.data_roots,
                 "jobs may read data only under this folder (repeatable; symlinks are resolved). "
                 "None given: anywhere this worker's user can read");
  app.add_option("--work-dir", options.work_dir, "data cache, job configs and rank logs")->required();
  app.add_option("--cpu-slots", options.cpu_slots, "ranks to run at once when there is no GPU")
      ->check(CLI::Range(0, 1024));
  app.add_option("--checkpoint-root", options.checkpoint_root,
                 "where jobs' checkpoints go (share it between workers so a job can move)");
  app.add_option("--advertise-host", options.advertise_host, "address other workers reach our ranks on");
  app.add_option("--trainer", options.trainer_path, "path of nightshift-trainer (default: beside this binary)");
  app.add_option("--prep-threads", options.prep_threads, "threads for data preparation")->check(CLI::Range(1, 256));
  app.add_option("--cache-max-bytes", options.cache_max_bytes,
                 "budget of the feature cache in bytes (least recently used entries are evicted); 0: none")
      ->check(CLI::NonNegativeNumber);
  std::string metrics_listen, metrics_port_file;
  app.add_option("--log-listen", options.log_listen, "HOST:PORT to serve rank logs to the coordinator on");
  app.add_option("--log-max-bytes", options.log_max_bytes, "a rank log rotates past this many bytes");
  app.add_option("--metrics-listen", metrics_listen, "HOST:PORT to serve Prometheus /metrics on (port 0: pick one)");
  app.add_option("--metrics-port-file", metrics_port_file, "write the metrics port to this file");
  CLI11_PARSE(app, argc, argv);
  if (Status s = ResolveRoots(&options.data_roots); !s.ok()) {
    NS_ERROR("worker: " << s.ToString());
    return 2;
  }
  if (options.data_roots.empty()) {
    NS_WARN("worker: no --data-root: jobs may read any path this process can (no path confinement)");
  } else {
    std::string roots;
    for (const auto& r : options.data_roots) roots += (roots.empty() ? "" : ", ") + r;
    NS_INFO("worker: data confined to " << roots);
  }
  {
    ClientOptions c{options.coordinator, options.token, options.token_file, options.tls_ca, options.tls_cert,
                    options.tls_key};
    Status s = ResolveToken(&c);
    auto channel = s.ok() ? MakeChannel(c) : StatusOr<std::shared_ptr<grpc::Channel>>(s);
    if (!channel.ok()) {
      NS_ERROR("worker: " << channel.status().ToString());
      return 2;
    }
  }

  std::error_code ec;
  std::filesystem::create_directories(options.work_dir, ec);
  if (ec) {
    NS_ERROR("worker: cannot create --work-dir " << options.work_dir << ": " << ec.message());
    return 2;
  }
  options.work_dir = std::filesystem::absolute(options.work_dir).string();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  NS_INFO("worker " << options.name << ": work dir " << options.work_dir << ", coordinator "
                    << options.coordinator);
  auto cache = FeatureCache::Open({options.work_dir + "/cache", options.cache_max_bytes});
  if (!cache.ok()) {
    NS_ERROR("worker: " << cache.status().ToString());
    return 2;
  }
  // Rank logs, served to the coordinator (which relays them to `nightshift job logs`).
  Agent* agent_ptr = nullptr;
  LogServiceImpl logs(options.work_dir, [&agent_ptr](const std::string& job) {
    return agent_ptr != nullptr && agent_ptr->IsRunning(job);
  });
  grpc::ServerBuilder builder;
  int log_port = 0;
  builder.AddListeningPort(options.log_listen, grpc::InsecureServerCredentials(), &log_port);
  builder.RegisterService(&logs);
  std::unique_ptr<grpc::Server> log_server = builder.BuildAndStart();
  if (!log_server || log_port == 0) {
    NS_ERROR("worker: cannot serve logs on --log-listen " << options.log_listen);
    return 2;
  }
  options.log_address = options.advertise_host + ":" + std::to_string(log_port);
  options.gpus = DiscoverGpus();
  for (const auto& g : options.gpus)
    NS_INFO("worker " << options.name << ": GPU " << g.index() << " " << g.name() << ", "
                      << g.memory_bytes() / (1 << 20) << " MiB");
  if (!options.gpus.empty())
    NS_INFO("worker " << options.name << ": one slot per GPU (" << options.gpus.size() << "); --cpu-slots ignored");
  Agent agent(options, cache.value().get());
  agent_ptr = &agent;
  std::unique_ptr<MetricsServer> metrics;
  std::shared_ptr<SnapshotCollector> collector;
  if (!metrics_listen.empty()) {
    auto m = MetricsServer::Start(metrics_listen);
    if (!m.ok()) {
      NS_ERROR("worker: " << m.status().ToString());
      return 2;
    }
    metrics = std::move(m.value());
    collector = std::make_shared<SnapshotCollector>([&agent](FamilyBuilder* b) { agent.CollectMetrics(b); });
    metrics->Register(collector);
    WritePortFile(metrics_port_file, metrics->port());
    NS_INFO("worker " << options.name << ": metrics on port " << metrics->port());
  }
  agent.Run(&g_stop);
  agent_ptr = nullptr;
  log_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}
