// nightshift-coordinator: parses flags, opens the Coordinator, serves gRPC, runs the
// control loop until SIGINT/SIGTERM.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "common/client.h"
#include "common/log.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "coordinator/service.h"

namespace nightshift {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

// Everything the command line sets.
struct Flags {
  std::string listen = "127.0.0.1:7070";
  CoordinatorOptions options;
  std::string port_file, metrics_listen, metrics_port_file, token_file;
  std::string checkpoint_root;  // the workers' shared --checkpoint-root, if this host mounts it
  TlsServerOptions tls;
  SubmitPolicy policy;
  std::string worker_tls_ca;  // PEM CA of the workers' file service certificates
  StreamLimitOptions streams;   // open WatchJob, StreamLogs and GetArtifacts streams
};

void AddFlags(CLI::App* app, Flags* f) {
  app->add_option("--listen", f->listen, "HOST:PORT to serve gRPC on (port 0: pick one)");
  app->add_option("--data-dir", f->options.data_dir, "directory of the RocksDB job store")->required();
  app->add_option("--lease-seconds", f->options.lease_seconds, "a worker silent this long is lost");
  app->add_option("--outage-grace-seconds", f->options.outage_grace_seconds,
                  "when no worker reaches the coordinator for half a lease (two or more registered), "
                  "none is declared lost for up to this long (default 600; 0: off)");
  app->add_option("--restart-backoff-seconds", f->options.restart_backoff_seconds,
                  "delay before a job's first restart (doubles each time, at most 60 s)");
  app->add_option("--checkpoint-root", f->checkpoint_root,
                  "the workers' shared --checkpoint-root as mounted here: `job artifacts` reads models there "
                  "(else from the worker that holds them)");
  app->add_option("--port-file", f->port_file, "write the port actually bound to this file");
  app->add_option("--metrics-listen", f->metrics_listen, "HOST:PORT to serve Prometheus /metrics on (port 0: pick one)");
  app->add_option("--metrics-port-file", f->metrics_port_file, "write the metrics port to this file");
  app->add_option("--token-file", f->token_file,
                  "lines `<sha256-hex-of-token> <role> <user>` (roles admin, user, worker); reloaded when it "
                  "changes. Without it: insecure mode, no authentication");
  app->add_option("--tls-cert", f->tls.cert, "PEM certificate chain: serve TLS (with --tls-key)");
  app->add_option("--tls-key", f->tls.key, "PEM private key of --tls-cert");
  app->add_option("--tls-client-ca", f->tls.client_ca, "PEM CA: require client certificates signed by it (mutual TLS)");
  app->add_option("--worker-tls-ca", f->worker_tls_ca,
                  "PEM CA of the workers' file service certificates: relay logs and models from them over TLS");
  app->add_flag("--allow-torchscript", f->policy.allow_torchscript,
                "let every user submit model.arch torchscript (their module's code runs on the workers)");
  app->add_option("--torchscript-user", f->policy.torchscript_users,
                  "a user who may submit model.arch torchscript (repeatable); admins always may");
  app->add_option("--max-jobs-per-user", f->options.max_jobs_per_user, "unfinished jobs one user may have")
      ->check(CLI::Range(1, 1000000));
  app->add_option("--max-user-priority", f->options.max_user_priority,
                  "the highest job priority a user may submit; admins may go above (default 100)")
      ->check(CLI::Range(-1000000, 1000000));
  app->add_option("--preemptible-below", f->options.preemptible_below,
                  "another user's job is preemptible only below this priority (the best-effort class); a user's "
                  "priority preempts that user's own jobs only (default 0: negative priorities are best-effort)")
      ->check(CLI::Range(-1000000, 1000001));
  app->add_option("--max-streams-per-user", f->streams.per_user,
                  "open watch, logs and artifacts streams one user may hold at once (default 64)")
      ->check(CLI::Range(1, 1000000));
  app->add_option("--max-streams", f->streams.total,
                  "open watch, logs and artifacts streams of all users together (default 1024)")
      ->check(CLI::Range(1, 1000000));
  app->add_option("--forget-workers-after", f->options.forget_workers_after_seconds,
                  "seconds after which a lost worker is forgotten (default 86400)")
      ->check(CLI::PositiveNumber);
  app->add_option("--retain-finished-days", f->options.retain_finished_days,
                  "finished jobs are removed, with their history, this many days after they finished "
                  "(default 30; 0: kept until `nightshift job delete`)")
      ->check(CLI::Range(0.0, 36500.0));
}

// Serves /metrics when --metrics-listen is set (null otherwise).
StatusOr<std::unique_ptr<MetricsServer>> StartMetrics(const Flags& f, CoordinatorMetrics* metrics,
                                                      const Coordinator* c) {
  if (f.metrics_listen.empty()) return std::unique_ptr<MetricsServer>();
  auto server = MetricsServer::Start(f.metrics_listen);
  if (!server.ok()) return server.status();
  metrics->Serve(server.value().get(), c);
  WritePortFile(f.metrics_port_file, server.value()->port());
  NS_INFO("coordinator: metrics on " << f.metrics_listen.substr(0, f.metrics_listen.rfind(':')) << ":"
                                     << server.value()->port() << "/metrics");
  return server;
}

// Ticks until SIGINT/SIGTERM (0), or until a failed store write stops the coordinator (1).
int RunControlLoop(Coordinator* c, CoordinatorMetrics* metrics, grpc::Server* server) {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  int rc = 0;
  while (!g_stop) {
    const auto t0 = std::chrono::steady_clock::now();
    c->Tick();
    metrics->SchedulingPass(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (Status s = c->store_status(); !s.ok()) {  // fail-stop: exit with the reason
      NS_ERROR("coordinator: " << s.message());
      rc = 1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (rc == 0) NS_INFO("coordinator: shutting down");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return rc;
}

// Test-only faults, from NIGHTSHIFT_FAULT_DROP_SUBMIT_REPLY=FRACTION (unset: none).
StatusOr<JobServiceFaults> FaultsFromEnv() {
  JobServiceFaults faults;
  const char* drop = std::getenv("NIGHTSHIFT_FAULT_DROP_SUBMIT_REPLY");
  if (drop == nullptr) return faults;
  char* end = nullptr;
  faults.drop_submit_reply = std::strtod(drop, &end);
  if (end == drop || *end != '\0' || faults.drop_submit_reply < 0 || faults.drop_submit_reply > 1)
    return Status::InvalidArgument("NIGHTSHIFT_FAULT_DROP_SUBMIT_REPLY: must be a fraction in [0, 1], got '" +
                                   std::string(drop) + "'");
  NS_WARN("coordinator: test fault on: dropping the reply of " << faults.drop_submit_reply
                                                              << " of accepted submissions");
  return faults;
}

int Fail(const Status& s) {
  NS_ERROR("coordinator: " << s.ToString());
  return 2;
}

}  // namespace
}  // namespace nightshift

int main(int argc, char** argv) {
  using namespace nightshift;
  CLI::App app{"Nightshift coordinator: accepts jobs, stores them, schedules their ranks"};
  Flags flags;
  AddFlags(&app, &flags);
  CLI11_PARSE(app, argc, argv);
  // It holds its TLS key and the workers' file-service keys: no process of its user reads
  // them through /proc. It has no token of its own; one left in its environment is wiped.
  (void)TakeTokenFromEnvironment();
  if (Status s = MakeUndumpable(); !s.ok()) return Fail(s);
  auto auth = Authenticator::Open(flags.token_file);
  if (!auth.ok()) return Fail(auth.status());
  auto server_creds = MakeServerCredentials(flags.tls);
  if (!server_creds.ok()) return Fail(server_creds.status());

  CoordinatorMetrics metrics;
  flags.options.observer = &metrics;
  auto coordinator = Coordinator::Open(flags.options);
  if (!coordinator.ok()) return Fail(coordinator.status());
  Coordinator* c = coordinator.value().get();
  auto metrics_server = StartMetrics(flags, &metrics, c);
  if (!metrics_server.ok()) return Fail(metrics_server.status());

  auto faults = FaultsFromEnv();
  if (!faults.ok()) return Fail(faults.status());
  JobServiceOptions job_options;
  job_options.checkpoint_root = flags.checkpoint_root;
  job_options.faults = faults.value();
  job_options.policy = flags.policy;
  job_options.streams = flags.streams;
  ClientOptions to_workers;
  to_workers.tls_ca = flags.worker_tls_ca;
  auto worker_credentials = ChannelCredentialsFor(to_workers);
  if (!worker_credentials.ok()) return Fail(worker_credentials.status());
  job_options.worker_credentials = worker_credentials.value();
  if (flags.worker_tls_ca.empty() && !flags.tls.cert.empty())
    NS_WARN("coordinator: serving TLS, but the workers' file services are reached in plaintext (give --worker-tls-ca)");
  JobServiceImpl jobs(c, &metrics, auth.value().get(), job_options);
  WorkerServiceImpl workers(c, &metrics, auth.value().get());
  AdminServiceImpl admin(c, &metrics, auth.value().get());
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, server_creds.value(), &port);
  builder.RegisterService(&jobs);
  builder.RegisterService(&workers);
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    NS_ERROR("coordinator: cannot listen on " << flags.listen);
    return 2;
  }
  const TlsServerOptions& tls = flags.tls;
  NS_INFO("coordinator: listening on " << flags.listen.substr(0, flags.listen.rfind(':')) << ":" << port
                                       << ", data in " << flags.options.data_dir << ", "
                                       << (tls.cert.empty() ? "plaintext (no TLS)" : tls.client_ca.empty() ? "TLS" : "mutual TLS")
                                       << ", " << (auth.value()->insecure() ? "insecure mode: no authentication"
                                                                            : "bearer tokens from " + flags.token_file));
  WritePortFile(flags.port_file, port);
  return RunControlLoop(c, &metrics, server.get());
}
