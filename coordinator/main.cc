// nightshift-coordinator: parses flags, opens the Coordinator, serves gRPC, runs the
// control loop until SIGINT/SIGTERM.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <thread>

#include "common/log.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "coordinator/service.h"

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
}  // namespace

int main(int argc, char** argv) {
  using namespace nightshift;
  CLI::App app{"Nightshift coordinator: accepts jobs, stores them, schedules their ranks"};
  std::string listen = "127.0.0.1:7070";
  CoordinatorOptions options;
  std::string port_file, metrics_listen, metrics_port_file;
  app.add_option("--listen", listen, "HOST:PORT to serve gRPC on (port 0: pick one)");
  app.add_option("--data-dir", options.data_dir, "directory of the RocksDB job store")->required();
  app.add_option("--lease-seconds", options.lease_seconds, "a worker silent this long is lost");
  app.add_option("--restart-backoff-seconds", options.restart_backoff_seconds,
                 "delay before a job's first restart (doubles each time, at most 60 s)");
  app.add_option("--port-file", port_file, "write the port actually bound to this file");
  app.add_option("--metrics-listen", metrics_listen, "HOST:PORT to serve Prometheus /metrics on (port 0: pick one)");
  app.add_option("--metrics-port-file", metrics_port_file, "write the metrics port to this file");
  std::string token_file;
  TlsServerOptions tls;
  app.add_option("--token-file", token_file,
                 "lines `<sha256-hex-of-token> <role> <user>` (roles admin, user, worker); reloaded when it "
                 "changes. Without it: insecure mode, no authentication");
  app.add_option("--tls-cert", tls.cert, "PEM certificate chain: serve TLS (with --tls-key)");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", tls.client_ca, "PEM CA: require client certificates signed by it (mutual TLS)");
  app.add_option("--max-jobs-per-user", options.max_jobs_per_user, "unfinished jobs one user may have")
      ->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  auto auth = Authenticator::Open(token_file);
  if (!auth.ok()) {
    NS_ERROR("coordinator: " << auth.status().ToString());
    return 2;
  }
  auto server_creds = MakeServerCredentials(tls);
  if (!server_creds.ok()) {
    NS_ERROR("coordinator: " << server_creds.status().ToString());
    return 2;
  }

  CoordinatorMetrics metrics;
  options.observer = &metrics;
  auto coordinator = Coordinator::Open(options);
  if (!coordinator.ok()) {
    NS_ERROR("coordinator: " << coordinator.status().ToString());
    return 2;
  }
  Coordinator* c = coordinator.value().get();
  std::unique_ptr<MetricsServer> metrics_server;
  if (!metrics_listen.empty()) {
    auto m = MetricsServer::Start(metrics_listen);
    if (!m.ok()) {
      NS_ERROR("coordinator: " << m.status().ToString());
      return 2;
    }
    metrics_server = std::move(m.value());
    metrics.Serve(metrics_server.get(), c);
    WritePortFile(metrics_port_file, metrics_server->port());
    NS_INFO("coordinator: metrics on " << metrics_listen.substr(0, metrics_listen.rfind(':')) << ":"
                                       << metrics_server->port() << "/metrics");
  }
  JobServiceImpl jobs(c, &metrics, auth.value().get());
  WorkerServiceImpl workers(c, &metrics, auth.value().get());
  AdminServiceImpl admin(c, &metrics, auth.value().get());

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, server_creds.value(), &port);
  builder.RegisterService(&jobs);
  builder.RegisterService(&workers);
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    NS_ERROR("coordinator: cannot listen on " << listen);
    return 2;
  }
  NS_INFO("coordinator: listening on " << listen.substr(0, listen.rfind(':')) << ":" << port
                                       << ", data in " << options.data_dir << ", "
                                       << (tls.cert.empty() ? "plaintext (no TLS)" : tls.client_ca.empty() ? "TLS" : "mutual TLS")
                                       << ", " << (auth.value()->insecure() ? "insecure mode: no authentication"
                                                                            : "bearer tokens from " + token_file));
  WritePortFile(port_file, port);

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!g_stop) {
    const auto t0 = std::chrono::steady_clock::now();
    c->Tick();
    metrics.SchedulingPass(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (Status s = c->store_status(); !s.ok()) {  // fail-stop: exit with the reason
      NS_ERROR("coordinator: " << s.message());
      server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  NS_INFO("coordinator: shutting down");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
