// nightshift-coordinator: parses flags, opens the Coordinator, serves gRPC, runs the
// control loop until SIGINT/SIGTERM.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "common/client.h"
#include "common/log.h"
#include "coordinator/allocation_tokens.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/kubernetes.h"
#include "coordinator/metrics.h"
#include "coordinator/provisioner.h"
#include "coordinator/service.h"
#include "coordinator/slurm.h"
#include "coordinator/sweeps.h"
#include "coordinator/tracking.h"

namespace nightshift {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
// Set when a report brought a sweep trial new evaluations: the sweep runner passes now
// (a losing trial is paused sooner, and runs fewer steps past its rung).
std::atomic<bool> g_sweep_cue{false};

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
  // --cluster slurm|kubernetes: the cluster allocates each attempt (coordinator/provisioner.h).
  std::string cluster = "agents";
  ProvisionerOptions provisioner;
  std::string allocation_worker;               // the worker binary the nodes run
  std::vector<std::string> slurm_priorities;   // MIN_PRIORITY:PARTITION[:QOS[:ACCOUNT]]
  SlurmOptions slurm;
  std::vector<std::string> kubernetes_priorities;  // MIN_PRIORITY:PRIORITY_CLASS[:QUEUE]
  KubernetesOptions kubernetes;
  double allocation_poll_seconds = 2;
  // --mlflow-uri: every job is reported to this MLflow tracking server (coordinator/tracking.h).
  HttpApiOptions mlflow;
  std::string mlflow_experiment = "nightshift/{owner}";
  std::string mlflow_owner_permission;
  double mlflow_poll_seconds = 2;
  double sweep_poll_seconds = 0.5;  // between passes of the sweep runner (coordinator/sweeps.h)
};

void AddTrackingFlags(CLI::App* app, Flags* f) {
  app->add_option("--mlflow-uri", f->mlflow.base,
                  "report every job (one run each: params, metrics, state, model) to this MLflow tracking server, "
                  "e.g. http://127.0.0.1:5000 (default: none)");
  app->add_option("--mlflow-token-file", f->mlflow.token_file,
                  "a file whose first line is sent to the MLflow server as `Authorization: Bearer` (read at every call)");
  app->add_option("--mlflow-ca-file", f->mlflow.ca_file, "PEM CA that verifies an https MLflow server (default: the system's)");
  CLI::Option* token = app->get_option("--mlflow-token-file");
  app->add_option("--mlflow-user-file", f->mlflow.basic_auth_file,
                  "a file whose first line, user:password, is sent to the MLflow server as HTTP Basic (its basic-auth "
                  "app; read at every call)")
      ->excludes(token);
  app->add_option("--mlflow-experiment", f->mlflow_experiment,
                  "the MLflow experiment a job's run goes to, {owner} replaced by the job's owner (default "
                  "nightshift/{owner}: one per user)");
  app->add_option("--mlflow-owner-permission", f->mlflow_owner_permission,
                  "grant the MLflow user named as each owner this permission on their experiment (MLflow's basic-auth "
                  "app; default: none granted)")
      ->check(CLI::IsMember({"READ", "EDIT", "MANAGE"}));
  app->add_option("--sweep-poll-seconds", f->sweep_poll_seconds,
                  "seconds between passes over the running sweeps: trials judged, paused, promoted, made (default 0.5)")
      ->check(CLI::PositiveNumber);
  app->add_option("--mlflow-poll-seconds", f->mlflow_poll_seconds, "seconds between reporting passes (default 2)")
      ->check(CLI::PositiveNumber);
}

void AddClusterFlags(CLI::App* app, Flags* f) {
  app->add_option("--cluster", f->cluster,
                  "who allocates the nodes: agents (our workers, our scheduler; default), slurm (each attempt "
                  "is a Slurm batch job running nightshift-worker on its nodes) or kubernetes (an Indexed Job)")
      ->check(CLI::IsMember({"agents", "slurm", "kubernetes"}));
  app->add_option("--kubernetes-api", f->kubernetes.api, "--cluster kubernetes: the API server (default: in-cluster)");
  app->add_option("--kubernetes-namespace", f->kubernetes.namespace_name, "where the Jobs go (default nightshift)");
  app->add_option("--kubernetes-image", f->kubernetes.image, "the worker image the pods run");
  app->add_option("--kubernetes-checkpoint-claim", f->kubernetes.checkpoint_claim,
                  "a ReadWriteMany PersistentVolumeClaim mounted at /checkpoints (give the workers "
                  "--allocation-worker-arg=--checkpoint-root=/checkpoints)");
  app->add_option("--kubernetes-data-claim", f->kubernetes.data_claim, "a PersistentVolumeClaim mounted read-only at /data");
  app->add_option("--kubernetes-token-secret", f->kubernetes.token_secret,
                  "a Secret mounted at /etc/nightshift (give --allocation-worker-arg=--token-file=/etc/nightshift/<key>)");
  app->add_option("--kubernetes-grace-seconds", f->kubernetes.termination_grace_seconds,
                  "the pods' termination grace period: time to checkpoint after SIGTERM (default 300)")
      ->check(CLI::Range(1, 86400));
  app->add_option("--kubernetes-run-as-user", f->kubernetes.run_as_user,
                  "the user and group id the pods run the worker as (default 10001, the images' nightshift user; "
                  "never root); a checkpoint claim must be writable by it")
      ->check(CLI::Range(1, 2147483647));
  app->add_option("--kubernetes-seccomp-profile", f->kubernetes.seccomp_profile,
                  "the pods' seccomp profile: RuntimeDefault (default), Unconfined, or Localhost:PATH (one that allows "
                  "unshare, so the worker can confine its jobs; docs/security.md)")
      ->check([](const std::string& p) {
        return p == "RuntimeDefault" || p == "Unconfined" || (p.rfind("Localhost:", 0) == 0 && p.size() > 10)
                   ? std::string()
                   : "RuntimeDefault, Unconfined or Localhost:PATH";
      });
  app->add_option("--kubernetes-priority", f->kubernetes_priorities,
                  "MIN_PRIORITY:PRIORITY_CLASS[:KUEUE_QUEUE]: jobs of at least this priority get that PriorityClass "
                  "and Kueue LocalQueue (then the Job is created suspended for Kueue to admit; repeatable)");
  app->add_option("--ranks-per-node", f->provisioner.ranks_per_node,
                  "--cluster slurm|kubernetes: ranks one node runs (its GPUs); a job takes ceil(world_size / this) nodes")
      ->check(CLI::Range(1, 1024));
  app->add_option("--allocation-worker", f->allocation_worker,
                  "--cluster slurm|kubernetes: the nightshift-worker binary as the nodes see it (default: beside this "
                  "one; kubernetes: nightshift-worker on the image's PATH)");
  app->add_option("--allocation-worker-arg", f->provisioner.worker_command,
                  "--cluster slurm|kubernetes: a flag for the nodes' workers, e.g. --allocation-worker-arg=--data-root=/data "
                  "(repeatable; give --work-dir and a shared --checkpoint-root)");
  app->add_option("--workers-dial", f->provisioner.coordinator_address,
                  "--cluster slurm|kubernetes: HOST:PORT the nodes' workers reach this coordinator on (default: --listen's "
                  "host and the bound port)");
  app->add_option("--slurm-priority", f->slurm_priorities,
                  "MIN_PRIORITY:PARTITION[:QOS[:ACCOUNT]]: jobs of at least this priority go there (the row "
                  "with the largest MIN_PRIORITY at or below a job's applies; repeatable; empty parts not passed)");
  app->add_flag("--slurm-submit-as-owner", f->slurm.submit_as_owner,
                "submit each allocation as the job's owner (sudo -n -u OWNER sbatch; needs a sudoers rule), so "
                "Slurm accounts it to them and their ranks run as them");
  app->add_option("--slurm-log-dir", f->slurm.log_dir, "where each allocation's slurm-<id>.out goes (sbatch --output)");
  app->add_option("--slurm-signal-seconds", f->slurm.signal_before_end_seconds,
                  "SIGTERM to the nodes' workers this long before the time limit, so the ranks checkpoint "
                  "(default 120)")->check(CLI::Range(1, 65535));
}

// --slurm-priority MIN_PRIORITY:PARTITION[:QOS[:ACCOUNT]] (and --kubernetes-priority
// MIN_PRIORITY:PRIORITY_CLASS[:QUEUE], read into the same three parts).
StatusOr<std::vector<SlurmPriorityRow>> ParsePriorityRows(const std::vector<std::string>& rows, const std::string& flag) {
  std::vector<SlurmPriorityRow> parsed;
  for (const std::string& row : rows) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t colon; (colon = row.find(':', start)) != std::string::npos; start = colon + 1)
      parts.push_back(row.substr(start, colon - start));
    parts.push_back(row.substr(start));
    SlurmPriorityRow r;
    char* end = nullptr;
    r.min_priority = static_cast<int>(std::strtol(parts[0].c_str(), &end, 10));
    if (parts.size() < 2 || parts.size() > 4 || parts[0].empty() || *end != '\0')
      return Status::InvalidArgument(flag + ": '" + row + "' is not MIN_PRIORITY:NAME[:NAME[:NAME]]");
    r.partition = parts[1];
    if (parts.size() > 2) r.qos = parts[2];
    if (parts.size() > 3) r.account = parts[3];
    parsed.push_back(r);
  }
  return parsed;
}

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
  AddClusterFlags(app, f);
  AddTrackingFlags(app, f);
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

// A thread that runs `pass` every `seconds` until SIGINT/SIGTERM (or until the control loop
// ends), logging an error when it first appears and again only when it changes. With
// `cue`: also within 0.1 s of *cue turning true (cleared as the wait ends).
class PassThread {
 public:
  PassThread(std::string what, double seconds, std::function<Status()> pass, std::atomic<bool>* cue = nullptr)
      : thread_([what = std::move(what), seconds, pass = std::move(pass), cue] {
          std::string last_error;
          while (!g_stop) {
            Status s = pass();
            if (!s.ok() && s.message() != last_error) NS_WARN("coordinator: " << what << ": " << s.message());
            last_error = s.ok() ? "" : s.message();
            for (double waited = 0; waited < seconds && !g_stop && !(cue && cue->exchange(false)); waited += 0.1)
              std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        }) {}
  ~PassThread() {
    g_stop = true;  // also when the control loop ended on a failed store write
    thread_.join();
  }

 private:
  std::thread thread_;
};

// --mlflow-uri: reporting passes on their own thread (coordinator/tracking.h).
class TrackingLoop {
 public:
  static StatusOr<std::unique_ptr<TrackingLoop>> Start(Flags* f, Coordinator* c) {
    std::string& uri = f->mlflow.base;
    while (!uri.empty() && uri.back() == '/') uri.pop_back();
    if (uri.empty()) return std::unique_ptr<TrackingLoop>();
    NS_RETURN_IF_ERROR(CheckOwnerPermission(f->mlflow_experiment, f->mlflow_owner_permission));
    // The experiments' seal key (tracking.h), derived from the coordinator's secret: the
    // same across restarts, known to no one else.
    StatusOr<AllocationTokens> secret = AllocationTokens::Open(f->options.data_dir + "/allocation-secret");
    if (!secret.ok()) return secret.status();
    NS_INFO("coordinator: reporting every job to MLflow at " << uri << ", experiment " << f->mlflow_experiment);
    return std::unique_ptr<TrackingLoop>(new TrackingLoop(*f, c, secret->Derive("mlflow-experiment-seal")));
  }

 private:
  TrackingLoop(const Flags& f, Coordinator* c, const std::string& seal_key)
      : api_(MakeCurlHttpApi(f.mlflow)),
        client_(api_.get()),
        reporter_(c, &client_, f.mlflow_experiment, f.mlflow_owner_permission, seal_key),
        thread_("MLflow", f.mlflow_poll_seconds, [this] { return reporter_.Pass(); }) {}
  std::unique_ptr<HttpApi> api_;
  MlflowClient client_;
  TrackingReporter reporter_;
  PassThread thread_;  // last: stopped first
};

// --cluster slurm|kubernetes with tokens: each allocation's workers get a token of their
// own, opening that attempt only (allocation_tokens.h), which `auth` accepts and the
// provisioner hands out. Null otherwise. The tokens must outlive both.
StatusOr<std::unique_ptr<AllocationTokens>> TrustAllocations(Flags* f, Authenticator* auth) {
  if (f->cluster == "agents" || auth->insecure()) return std::unique_ptr<AllocationTokens>();
  auto opened = AllocationTokens::Open(f->options.data_dir + "/allocation-secret");
  if (!opened.ok()) return opened.status();
  auto tokens = std::make_unique<AllocationTokens>(std::move(opened.value()));
  auth->TrustAllocations(tokens.get());
  f->provisioner.tokens = tokens.get();
  return tokens;
}

// --cluster slurm|kubernetes: a thread that runs provisioning passes until SIGINT/SIGTERM.
class ProvisionerLoop {
 public:
  static StatusOr<std::unique_ptr<ProvisionerLoop>> Start(Flags* f, Coordinator* c, int port) {
    if (f->cluster == "agents") return std::unique_ptr<ProvisionerLoop>();
    auto rows = f->cluster == "slurm" ? ParsePriorityRows(f->slurm_priorities, "--slurm-priority")
                                      : ParsePriorityRows(f->kubernetes_priorities, "--kubernetes-priority");
    if (!rows.ok()) return rows.status();
    for (const SlurmPriorityRow& r : *rows)  // the same three parts: class, queue
      f->kubernetes.priorities.push_back({r.min_priority, r.partition, r.qos});
    f->slurm.priorities = *rows;
    if (f->cluster == "kubernetes" && f->kubernetes.image.empty())
      return Status::InvalidArgument("--cluster kubernetes needs --kubernetes-image");
    if (f->cluster == "slurm") NS_RETURN_IF_ERROR(SlurmCluster::CheckUserName());
    ProvisionerOptions& o = f->provisioner;
    if (o.coordinator_address.empty()) {
      const std::string host = f->listen.substr(0, f->listen.rfind(':'));
      if (host == "0.0.0.0" || host == "[::]" || host.empty())
        return Status::InvalidArgument("--workers-dial: --listen " + f->listen + " names no address the nodes can dial");
      o.coordinator_address = host + ":" + std::to_string(port);
    }
    std::string worker = f->allocation_worker;
    if (worker.empty() && f->cluster == "kubernetes") worker = "nightshift-worker";  // on the image's PATH
    if (worker.empty())
      worker = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "nightshift-worker").string();
    o.worker_command.insert(o.worker_command.begin(), worker);
    auto loop = std::unique_ptr<ProvisionerLoop>(new ProvisionerLoop(*f, c));
    NS_INFO("coordinator: --cluster " << f->cluster << ": each attempt is one allocation of ceil(world_size / "
                                       << o.ranks_per_node << ") nodes; its workers dial " << o.coordinator_address);
    return loop;
  }

 private:
  ProvisionerLoop(const Flags& f, Coordinator* c)
      : api_(f.cluster == "kubernetes" ? MakeKubernetesApi(f.kubernetes) : nullptr),
        cluster_(f.cluster == "kubernetes"
                     ? std::unique_ptr<ClusterAllocator>(new KubernetesCluster(f.kubernetes, api_.get()))
                     : std::unique_ptr<ClusterAllocator>(new SlurmCluster(f.slurm, &runner_))),
        provisioner_(f.provisioner, c, cluster_.get()),
        thread_("cluster", f.allocation_poll_seconds, [this] { return provisioner_.Pass(); }) {}
  SubprocessRunner runner_;            // Slurm's commands
  std::unique_ptr<HttpApi> api_;  // Kubernetes' API server (null for Slurm)
  std::unique_ptr<ClusterAllocator> cluster_;
  Provisioner provisioner_;
  PassThread thread_;  // last: stopped first
};

// JobService's settings: injected faults (tests), the checkpoint root, the scheduling
// policy, stream caps, and how workers' file services are reached.
StatusOr<JobServiceOptions> JobServiceOptionsFrom(const Flags& flags) {
  auto faults = FaultsFromEnv();
  if (!faults.ok()) return faults.status();
  JobServiceOptions options;
  options.checkpoint_root = flags.checkpoint_root;
  options.faults = faults.value();
  options.policy = flags.policy;
  options.streams = flags.streams;
  ClientOptions to_workers;
  to_workers.tls_ca = flags.worker_tls_ca;
  auto worker_credentials = ChannelCredentialsFor(to_workers);
  if (!worker_credentials.ok()) return worker_credentials.status();
  options.worker_credentials = worker_credentials.value();
  if (flags.worker_tls_ca.empty() && !flags.tls.cert.empty())
    NS_WARN("coordinator: serving TLS, but the workers' file services are reached in plaintext (give --worker-tls-ca)");
  return options;
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
  flags.options.cluster_allocates = flags.cluster != "agents";
  flags.options.tracking = !flags.mlflow.base.empty();
  flags.options.on_trial_evaluation = [] { g_sweep_cue = true; };
  auto coordinator = Coordinator::Open(flags.options);
  if (!coordinator.ok()) return Fail(coordinator.status());
  Coordinator* c = coordinator.value().get();
  auto metrics_server = StartMetrics(flags, &metrics, c);
  if (!metrics_server.ok()) return Fail(metrics_server.status());
  auto allocation_tokens = TrustAllocations(&flags, auth.value().get());
  if (!allocation_tokens.ok()) return Fail(allocation_tokens.status());

  auto job_options = JobServiceOptionsFrom(flags);
  if (!job_options.ok()) return Fail(job_options.status());
  JobServiceImpl jobs(c, &metrics, auth.value().get(), job_options.value());
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
  auto provisioner = ProvisionerLoop::Start(&flags, c, port);
  if (!provisioner.ok()) return Fail(provisioner.status());
  auto tracking = TrackingLoop::Start(&flags, c);
  if (!tracking.ok()) return Fail(tracking.status());
  SweepRunner sweeps(c);
  PassThread sweep_thread("sweeps", flags.sweep_poll_seconds, [&sweeps] { return sweeps.Pass(); }, &g_sweep_cue);
  return RunControlLoop(c, &metrics, server.get());
}
