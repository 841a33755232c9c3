// nightshift-worker: parses flags into WorkerOptions, checks them, starts the log and
// metrics endpoints and runs the agent until SIGINT/SIGTERM.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "common/client.h"
#include "common/io/net.h"
#include "common/log.h"
#include "common/metrics.h"
#include "worker/agent.h"
#include "worker/confinement.h"
#include "worker/coordinator_client.h"
#include "worker/gpu_inventory.h"
#include "worker/host_memory.h"
#include "worker/launcher.h"
#include "worker/file_service.h"
#include "worker/worker_options.h"

namespace nightshift {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

struct Flags {
  WorkerOptions options;
  std::string token_on_command_line;  // --token: refused (every local user can read it)
  std::string metrics_listen;     // HOST:PORT for /metrics; empty: none
  std::string metrics_port_file;  // where to write the metrics port
  std::string allocation_job, allocation_id;  // --allocation-job, --allocation-id
  int allocation_attempt = 0;
  double memory_gb = 0;  // --memory-gb; 0: HostMemoryBytes()
};

// --allocation-job: the worker serves one attempt of one job inside a cluster
// allocation. What the allocation decides is taken from it unless given: the name
// (<job>-a<attempt>-<Slurm node name, pod<index> of a Kubernetes Indexed Job, or host
// name>), a work dir of its own under
// --work-dir, the address the other nodes reach it on (the one that routes to the
// coordinator), and the file service on that address.
Status EnterAllocation(Flags* f) {
  WorkerOptions& o = f->options;
  if (f->allocation_job.empty()) {
    if (o.name.empty()) return Status::InvalidArgument("--name is required (outside an allocation)");
    return Status::OK();
  }
  o.allocation.set_job_id(f->allocation_job);
  o.allocation.set_attempt(f->allocation_attempt);
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  o.allocation.set_cluster_id(!f->allocation_id.empty() ? f->allocation_id : slurm_job != nullptr ? slurm_job : "");
  if (o.name.empty()) {  // the Slurm node, the Kubernetes pod's index, else the host
    const char* node = std::getenv("SLURMD_NODENAME");
    const char* index = std::getenv("JOB_COMPLETION_INDEX");
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    o.name = f->allocation_job + "-a" + std::to_string(f->allocation_attempt) + "-" +
             (node != nullptr ? node : index != nullptr ? "pod" + std::string(index) : std::string(host));
  }
  o.work_dir += "/" + o.name;
  if (o.advertise_host == "127.0.0.1" || o.advertise_host == "auto") {
    std::string host = o.coordinator.substr(0, o.coordinator.rfind(':')), error;
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    const std::string ours = LocalAddressToward(host, &error);
    if (ours.empty()) return Status::Unavailable("--advertise-host: " + error + " (the coordinator)");
    o.advertise_host = ours.find(':') != std::string::npos ? "[" + ours + "]" : ours;
  }
  if (o.log_listen == "127.0.0.1:0") o.log_listen = o.advertise_host + ":0";
  NS_INFO("worker " << o.name << ": serves attempt " << f->allocation_attempt << " of job " << f->allocation_job
                    << " in allocation " << o.allocation.cluster_id() << ", reached on " << o.advertise_host);
  return Status::OK();
}

void AddFlags(CLI::App* app, Flags* f) {
  WorkerOptions& o = f->options;
  app->add_option("--coordinator", o.coordinator, "coordinator HOST:PORT")->required();
  app->add_option("--name", o.name,
                  "this worker's unique name (required, but in an allocation: <job>-a<attempt>-<node>)");
  app->add_option("--allocation-job", f->allocation_job,
                  "serve only this job, inside a cluster allocation started for it (--cluster slurm runs this "
                  "under srun), and exit when its attempt is over");
  app->add_option("--allocation-attempt", f->allocation_attempt, "with --allocation-job: the attempt served")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--allocation-id", f->allocation_id,
                  "with --allocation-job: the cluster's id of the allocation (default: $SLURM_JOB_ID)");
  app->add_option("--token", f->token_on_command_line,
                  "refused: a command line is readable by every local user; use --token-file");
  app->add_option("--token-file", o.token_file,
                  "file whose first line is the bearer token (role worker) for the coordinator (else env "
                  "NIGHTSHIFT_TOKEN); read once at start");
  app->add_option("--run-as", o.run_as,
                  "as root: the user jobs run as, without capabilities (default nightshift-job if that user "
                  "exists, else nobody; root keeps jobs privileged). Not root: jobs run as this worker's user");
  app->add_option("--tls-ca", o.tls_ca, "PEM CA of the coordinator's certificate: connect with TLS");
  app->add_option("--tls-cert", o.tls_cert, "PEM certificate of this worker (mutual TLS)");
  app->add_option("--tls-key", o.tls_key, "PEM key of --tls-cert");
  app->add_option("--file-service-tls-cert", o.file_service_cert,
                  "PEM certificate of this worker's file service (for its --advertise-host; signed by the CA that "
                  "--tls-ca names): required with --tls-ca");
  app->add_option("--file-service-tls-key", o.file_service_key, "PEM key of --file-service-tls-cert");
  app->add_option("--data-root", o.data_roots,
                  "jobs may read data and model folders only under this folder (repeatable; symlinks are "
                  "resolved). None given: jobs may read nothing, unless --allow-any-path");
  app->add_flag("--allow-any-path", o.allow_any_path,
                "without --data-root, let jobs read any path this worker's user can (one tenant's job can then "
                "read the worker's own files and other tenants' data: for a single-user machine only)");
  app->add_option("--work-dir", o.work_dir, "data cache, job configs and rank logs")->required();
  app->add_option("--cpu-slots", o.cpu_slots, "ranks to run at once when there is no GPU")
      ->check(CLI::Range(0, 1024));
  app->add_option("--memory-gb", f->memory_gb,
                  "host memory, in GiB, this worker's ranks may use together: the coordinator places a job's "
                  "rank here only if its resources.memory_gb fits in this over the slots (default: the host's "
                  "memory, or this process's cgroup limit where lower)")
      ->check(CLI::Range(0.0, 1048576.0));  // up to 1 PiB: no overflow in bytes
  app->add_option("--checkpoint-root", o.checkpoint_root,
                  "where jobs' checkpoints go (share it between workers so a job can move)");
  app->add_option("--advertise-host", o.advertise_host, "address other workers reach our ranks on");
  app->add_option("--trainer", o.trainer_path, "path of nightshift-trainer (default: beside this binary)");
  app->add_option("--prep-threads", o.prep_threads, "threads for data preparation")->check(CLI::Range(1, 256));
  app->add_option("--max-prep-bytes", o.max_prep_bytes,
                  "the most bytes data preparation reads from one job's data (past it the job fails as a user error)")
      ->check(CLI::PositiveNumber);
  app->add_option("--cache-max-bytes", o.cache_max_bytes,
                  "budget of the feature cache in bytes (least recently used entries are evicted); 0: none")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--log-listen", o.log_listen, "HOST:PORT to serve rank logs to the coordinator on");
  app->add_option("--log-max-bytes", o.log_max_bytes, "a rank log rotates past this many bytes");
  app->add_option("--metrics-listen", f->metrics_listen, "HOST:PORT to serve Prometheus /metrics on (port 0: pick one)");
  app->add_option("--metrics-port-file", f->metrics_port_file, "write the metrics port to this file");
}

// Checked once at start-up: the data roots resolved, the work dir created and absolute.
Status CheckOptions(WorkerOptions* o) {
  NS_RETURN_IF_ERROR(ResolveRoots(&o->data_roots));
  if (o->data_roots.empty() && o->allow_any_path) {
    NS_WARN("worker: --allow-any-path: jobs may read any path this process can (no path confinement)");
    o->data_roots = {"/"};
  } else if (o->data_roots.empty()) {
    NS_WARN("worker: no --data-root: every job that names a path is refused (give --data-root DIR)");
  } else {
    std::string roots;
    for (const auto& r : o->data_roots) roots += (roots.empty() ? "" : ", ") + r;
    NS_INFO("worker: data confined to " << roots);
  }
  std::error_code ec;
  // In an allocation, the work dir of its own (EnterAllocation) made as a job's folder is
  // (confinement.h): the node's --work-dir may be every owner's.
  if (!o->allocation.job_id().empty()) {
    NS_RETURN_IF_ERROR(MakeOwnFolder(o->work_dir, "the allocation's work dir"));
  } else {
    std::filesystem::create_directories(o->work_dir, ec);
  }
  // The node's disk (full, read-only), not the flag: exit 1, another try elsewhere.
  if (ec) return Status::IOError("cannot create --work-dir " + o->work_dir + ": " + ec.message());
  o->work_dir = std::filesystem::absolute(o->work_dir).lexically_normal().string();  // no "/./": opened beneath
  return RootsApartFromOwnFolders(o->data_roots, OwnFolders(*o));
}

// Serves the rank logs to the coordinator (which relays them to `nightshift job logs`);
// sets options->log_address to where it listens.
StatusOr<std::unique_ptr<grpc::Server>> ServeFiles(FileServiceImpl* logs, WorkerOptions* options) {
  // The cluster uses TLS: so do the workers' files (checkpoints, models, logs).
  if (!options->tls_ca.empty() && options->file_service_cert.empty())
    return Status::InvalidArgument(
        "--tls-ca: the cluster uses TLS, so this worker's file service does too: give it "
        "--file-service-tls-cert and --file-service-tls-key");
  auto credentials =
      MakeServerCredentials({options->file_service_cert, options->file_service_key, "", "--file-service-tls"});
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options->log_listen, credentials.value(), &port);
  builder.RegisterService(logs);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return Status::Unavailable("cannot serve logs on --log-listen " + options->log_listen);
  options->log_address = options->advertise_host + ":" + std::to_string(port);
  return server;
}

Status FindGpus(WorkerOptions* options) {
  // Only those the allocation (or whoever started us) gives: CUDA_VISIBLE_DEVICES.
  StatusOr<std::vector<v1::GpuInfo>> visible = VisibleGpus(DiscoverGpus(), std::getenv("CUDA_VISIBLE_DEVICES"));
  if (!visible.ok()) return visible.status();
  options->gpus = *visible;
  for (const auto& g : options->gpus)
    NS_INFO("worker " << options->name << ": GPU " << g.index() << " " << g.name() << ", "
                      << g.memory_bytes() / (1 << 20) << " MiB");
  if (!options->gpus.empty())
    NS_INFO("worker " << options->name << ": one slot per GPU (" << options->gpus.size() << "); --cpu-slots ignored");
  return Status::OK();
}

// Exit codes: 2 when what the worker was given is wrong (a flag, an option's value: a
// restart fails the same way, and --cluster kubernetes fails the Job on it, see
// coordinator/kubernetes.h), 1 for the rest (the coordinator unreachable, a disk error:
// worth another try).
constexpr int kBadFlags = 2;
int Fail(const Status& s) {
  NS_ERROR("worker: " << s.ToString());
  return s.code() == Status::kInvalidArgument ? kBadFlags : 1;
}

// Before anything else, while this is the only thread: the token is taken out of the
// environment and the command line is refused it, and the process becomes non-dumpable,
// so a job running as the same user cannot read either through /proc.
Status KeepTheTokenToOurselves(Flags* flags) {
  if (!flags->token_on_command_line.empty())
    return Status::InvalidArgument(
        "--token: a command line is readable by every user of this machine (ps, /proc/PID/cmdline); put the "
        "token in a file only the worker can read and pass --token-file FILE (or set NIGHTSHIFT_TOKEN)");
  const std::string from_environment = TakeTokenFromEnvironment();
  // An allocation's worker: the attempt's own token (coordinator/allocation_tokens.h) when
  // the coordinator gave one (it beats --token-file, which stays hidden from the jobs all
  // the same), else --token-file's (an admin's) or insecure mode.
  const std::string allocation = TakeTokenFromEnvironment(kAllocationTokenEnv);
  if (!allocation.empty() && !flags->allocation_job.empty()) {
    flags->options.token = allocation;
  } else if (flags->options.token_file.empty()) {
    flags->options.token = from_environment;
  }
  return MakeUndumpable();
}

// Jobs' processes: the token file hidden; the work dir and the checkpoint root hidden but
// for each job's own folders; as root, run as --run-as.
Status ConfineJobs(const WorkerOptions& options) {
  ConfinementOptions confinement;
  if (!options.token_file.empty()) confinement.hidden_files.push_back(options.token_file);
  confinement.hidden_folders = {options.work_dir, CheckpointRoot(options)};
  confinement.run_as = options.run_as;
  Status s = ConfineChildren(confinement);
  if (s.code() == Status::kUnavailable && ::geteuid() != 0) {
    NS_WARN("worker: " << s.message() << ". Jobs run as this worker's user and can read its --token-file and "
                       << "its work dir; see docs/security.md");
    return Status::OK();
  }
  if (s.code() == Status::kUnavailable)
    return Status::Unavailable(s.message() + " (a root worker needs CAP_SYS_ADMIN: in a container, grant it, or "
                               "run the worker as a user that is not root)");
  if (s.ok()) NS_INFO("worker: " << DescribeConfinement());
  return s;
}

int Main(Flags& flags) {
  WorkerOptions& options = flags.options;
  if (Status s = KeepTheTokenToOurselves(&flags); !s.ok()) return Fail(s);
  if (Status s = EnterAllocation(&flags); !s.ok()) return Fail(s);
  if (Status s = CheckOptions(&options); !s.ok()) return Fail(s);
  if (Status s = ConfineJobs(options); !s.ok()) return Fail(s);
  auto coordinator = ConnectToCoordinator(options);
  if (!coordinator.ok()) return Fail(coordinator.status());
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  NS_INFO("worker " << options.name << ": work dir " << options.work_dir << ", coordinator " << options.coordinator);
  auto cache = FeatureCache::Open({options.work_dir + "/cache", options.cache_max_bytes});
  if (!cache.ok()) return Fail(cache.status());
  std::atomic<Agent*> agent_ptr{nullptr};  // read by the log service's threads
  const std::string checkpoint_root = CheckpointRoot(options);
  FileServiceAuth file_auth;  // keyed by the agent at each registration
  FileServiceImpl logs(&file_auth, options.work_dir, [&agent_ptr](const std::string& job) {
    Agent* agent = agent_ptr.load();
    return agent != nullptr && agent->IsRunning(job);
  }, checkpoint_root, options.trainer_path.empty() ? BinaryBesideUs("nightshift-trainer") : options.trainer_path);
  auto log_server = ServeFiles(&logs, &options);
  if (!log_server.ok()) return Fail(log_server.status());
  if (Status s = FindGpus(&options); !s.ok()) return Fail(s);
  options.memory_bytes = flags.memory_gb > 0 ? static_cast<int64_t>(flags.memory_gb * (int64_t{1} << 30))
                                             : HostMemoryBytes();
  Agent agent(options, cache.value().get(), std::move(coordinator.value()), &file_auth);
  agent_ptr = &agent;
  std::unique_ptr<MetricsServer> metrics;
  std::shared_ptr<SnapshotCollector> collector;
  if (!flags.metrics_listen.empty()) {
    auto m = MetricsServer::Start(flags.metrics_listen);
    if (!m.ok()) return Fail(m.status());
    metrics = std::move(m.value());
    collector = std::make_shared<SnapshotCollector>([&agent](FamilyBuilder* b) { agent.CollectMetrics(b); });
    metrics->Register(collector);
    WritePortFile(flags.metrics_port_file, metrics->port());
    NS_INFO("worker " << options.name << ": metrics on port " << metrics->port());
  }
  agent.Run(&g_stop);
  agent_ptr = nullptr;
  log_server.value()->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  // In an allocation, stopped by a signal (the time limit's --signal, preemption's grace)
  // rather than released: 143 tells the coordinator the cluster ended the attempt.
  return !options.allocation.job_id().empty() && !agent.released() ? 128 + SIGTERM : 0;
}

}  // namespace
}  // namespace nightshift

int main(int argc, char** argv) {
  CLI::App app{"Nightshift worker: runs the ranks of jobs as nightshift-trainer processes"};
  nightshift::Flags flags;
  AddFlags(&app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the usage or the error
    return rc == 0 ? 0 : nightshift::kBadFlags;
  }
  return nightshift::Main(flags);
}
