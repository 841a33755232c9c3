// A real cluster for end-to-end tests: the coordinator and workers are the built
// binaries, started on 127.0.0.1 with ports they pick, logging to files in the test's
// directory, and always killed by the destructor. With UseHosts, each runs inside a test
// host (tests/common/test_hosts.h) on that host's 198.18.0.x address instead.
#ifndef NIGHTSHIFT_TESTS_E2E_CLUSTER_H_
#define NIGHTSHIFT_TESTS_E2E_CLUSTER_H_

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/job_state.h"
#include "tests/common/test_hosts.h"
#include "nightshift/v1/admin.grpc.pb.h"
#include "nightshift/v1/jobs.grpc.pb.h"

namespace nightshift::testing_e2e {

namespace fs = std::filesystem;

// A TCP port on 127.0.0.1 that was free a moment ago (for a server the test starts).
inline int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A whole file ("" when it cannot be read).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// GetJob of `id` through `stub`, with a 10 s deadline.
inline grpc::Status GetJobFrom(v1::JobService::Stub* stub, const std::string& id, v1::Job* job) {
  v1::GetJobRequest req;
  req.set_id(id);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return stub->GetJob(&ctx, req, job);
}

// The job read by `get(&job)` every 100 ms until `done(job)` holds or `seconds` pass; the
// last view.
template <typename Get, typename Pred>
v1::Job PollJob(Get get, int seconds, Pred done) {
  v1::Job job;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (get(&job).ok() && done(job)) return job;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return job;
}

class Process {
 public:
  Process() = default;
  Process(const std::vector<std::string>& argv, const std::string& log,
          const std::map<std::string, std::string>& env = {}) {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      FILE* f = std::freopen(log.c_str(), "a", stderr);
      (void)f;
      ::dup2(2, 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  Process(Process&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  Process& operator=(Process&& o) noexcept {
    Kill(SIGKILL);
    pid_ = o.pid_;
    o.pid_ = -1;
    return *this;
  }
  ~Process() { Kill(SIGKILL); }
  // Sends `sig` and reaps the process (SIGTERM: waits up to 20 s, then SIGKILL).
  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    for (int i = 0; i < 200 && sig != SIGKILL; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

class Cluster {
 public:
  explicit Cluster(const std::string& name) {
    dir_ = fs::path(::testing::TempDir()) / ("nightshift-e2e-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Cluster() {
    workers_.clear();
    coordinator_.Kill(SIGKILL);
    if (!::testing::Test::HasFailure()) fs::remove_all(dir_);
  }
  std::string dir() const { return dir_.string(); }

  // From now on the coordinator runs inside `coordinator_host` of `hosts` (not owned; it
  // must outlive this cluster), listening on that host's address, and StartWorker and
  // Cli may name a host too. The test's own stubs (jobs(), admin(), Submit, Get) cannot
  // reach a coordinator in a host: use Cli from a host instead.
  void UseHosts(const testing::TestHosts* hosts, int coordinator_host) {
    hosts_ = hosts;
    coordinator_host_ = coordinator_host;
  }

  // Starts (or restarts) the coordinator on a new port (`same_port`: on the port it had,
  // so running workers find it again), with `env` added to its environment; waits until
  // it wrote its port.
  void StartCoordinator(const std::vector<std::string>& extra_args = {}, bool same_port = false,
                        const std::map<std::string, std::string>& env = {}) {
    const std::string port_file = dir() + "/coordinator.port";
    fs::remove(port_file);
    const std::string host = hosts_ != nullptr ? hosts_->address(coordinator_host_) : "127.0.0.1";
    const std::string listen = same_port && !address_.empty() ? address_ : host + ":0";
    std::vector<std::string> argv = {Bin("nightshift-coordinator"), "--listen", listen, "--data-dir",
                                     dir() + "/coordinator-db", "--port-file", port_file, "--lease-seconds", "5"};
    if (std::find(extra_args.begin(), extra_args.end(), "--restart-backoff-seconds") == extra_args.end())
      argv.insert(argv.end(), {"--restart-backoff-seconds", "0.2"});
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    if (hosts_ != nullptr) argv = hosts_->InHost(coordinator_host_, argv);
    coordinator_ = Process(argv, dir() + "/coordinator.log", env);
    for (int i = 0; i < 300 && !fs::exists(port_file); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(port_file);
    int port = 0;
    in >> port;
    address_ = host + ":" + std::to_string(port);
    auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    std::lock_guard<std::mutex> lock(stubs_mu_);
    jobs_ = v1::JobService::NewStub(channel);
    admin_ = v1::AdminService::NewStub(channel);
  }
  Process& coordinator() { return coordinator_; }
  // Shared: a test's threads may call them while another restarts the coordinator, which
  // replaces them; a call holds the stub it began with.
  std::shared_ptr<v1::AdminService::Stub> admin() {
    std::lock_guard<std::mutex> lock(stubs_mu_);
    return admin_;
  }
  std::shared_ptr<v1::JobService::Stub> jobs() {
    std::lock_guard<std::mutex> lock(stubs_mu_);
    return jobs_;
  }

  // Starts a worker (inside test host `host`, after UseHosts); returns its index for worker(i).
  size_t StartWorker(const std::string& name, int slots, const std::map<std::string, std::string>& env = {},
                     const std::vector<std::string>& extra_args = {}, int host = -1) {
    std::vector<std::string> argv = {Bin("nightshift-worker"), "--coordinator", address_, "--name", name,
                                     "--work-dir", dir() + "/" + name, "--cpu-slots", std::to_string(slots)};
    if (shared_checkpoints_) argv.insert(argv.end(), {"--checkpoint-root", dir() + "/checkpoints"});
    if (host >= 0) {
      const std::string address = hosts_->address(host);
      argv.insert(argv.end(), {"--advertise-host", address, "--log-listen", address + ":0"});
    }
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    // Test data lies in temporary folders and data/: anywhere, unless the test confines.
    const auto has = [&](const char* flag) { return std::find(extra_args.begin(), extra_args.end(), flag) != extra_args.end(); };
    if (!has("--data-root") && !has("--no-data-root")) argv.push_back("--allow-any-path");
    argv.erase(std::remove(argv.begin(), argv.end(), std::string("--no-data-root")), argv.end());
    if (host >= 0) argv = hosts_->InHost(host, argv);
    workers_.emplace_back(argv, dir() + "/" + name + ".log", env);
    return workers_.size() - 1;
  }
  Process& worker(size_t i) { return workers_.at(i); }
  // Workers started after this keep checkpoints on their own disk (<work dir>/checkpoints)
  // instead of the cluster's shared --checkpoint-root.
  void UseOwnDisks() { shared_checkpoints_ = false; }

  // Spec text with the data path filled in.
  grpc::Status Submit(const std::string& yaml, v1::Job* job) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(yaml);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return jobs()->SubmitJob(&ctx, req, job);
  }
  grpc::Status Get(const std::string& id, v1::Job* job) { return GetJobFrom(jobs().get(), id, job); }
  // Polls until the job is in a terminal state or `seconds` pass; returns the last view.
  v1::Job WaitForEnd(const std::string& id, int seconds) {
    return WaitFor(id, seconds, [](const v1::Job& job) { return IsTerminal(job.state()); });
  }
  const std::string& address() const { return address_; }
  std::string Bin(const std::string& name) const { return std::string(NIGHTSHIFT_BIN_DIR) + "/" + name; }

  // Polls until `done(job)` holds or `seconds` pass; returns the last view.
  template <typename Pred>
  v1::Job WaitFor(const std::string& id, int seconds, Pred done) {
    // Get each time: another thread may restart the coordinator on a new port.
    return PollJob([&](v1::Job* job) { return Get(id, job); }, seconds, done);
  }

  // The pid of a process whose command line mentions both `binary` and `needle`, or -1.
  // The pid of a process whose command line contains every one of `needles`, or -1.
  // Tests run in parallel and every cluster numbers its jobs from j-000001: include this
  // cluster's directory among the needles (TrainerOf does), or another test's process matches.
  static pid_t FindProcess(const std::vector<std::string>& needles) {
    for (const auto& e : fs::directory_iterator("/proc")) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
      if (pid <= 0) continue;
      std::string cmdline = ReadAll((e.path() / "cmdline").string());
      for (char& c : cmdline)
        if (c == '\0') c = ' ';
      bool all = true;
      for (const auto& n : needles) all = all && cmdline.find(n) != std::string::npos;
      if (all) return pid;
    }
    return -1;
  }

  // The trainer of this cluster running `job_id`, or -1.
  pid_t TrainerOf(const std::string& job_id) const {
    return FindProcess({"nightshift-trainer", dir() + "/", "/jobs/" + job_id + "/attempt-"});
  }

  // Reads a port written by a --*port-file flag (waits up to 15 s for it).
  int ReadPortFile(const std::string& path) {
    for (int i = 0; i < 300 && !fs::exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(path);
    int port = 0;
    in >> port;
    return port;
  }

  // Runs a shell command; returns its exit code and fills *out with stdout and stderr.
  static int Shell(const std::string& cmd, std::string* out) {
    FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
    char buf[4096];
    size_t n;
    out->clear();
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
    int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Runs the CLI (inside test host `host`, after UseHosts); returns its exit code and
  // fills *out with its stdout and stderr.
  int Cli(const std::vector<std::string>& args, std::string* out, int host = -1) {
    std::string cmd = (host >= 0 ? hosts_->ShellPrefix(host) : "") + Bin("nightshift") + " --coordinator " + address_;
    for (const auto& a : args) cmd += " '" + a + "'";
    return Shell(cmd, out);
  }

  // Two classes of short mails with distinct vocabularies, `per_class` of each.
  std::string MakeData(int per_class, const std::string& name = "data") {
    const std::string root = dir() + "/" + name;
    const char* words[2][8] = {{"meeting", "project", "lunch", "report", "agenda", "thanks", "team", "review"},
                               {"winner", "prize", "free", "money", "click", "offer", "cash", "bonus"}};
    const char* shared[4] = {"the", "and", "you", "today"};
    const char* labels[2] = {"ham", "spam"};
    for (int c = 0; c < 2; ++c) {
      fs::create_directories(root + "/" + labels[c]);
      for (int i = 0; i < per_class; ++i) {
        std::ofstream f(root + "/" + labels[c] + "/" + std::to_string(i) + ".txt");
        for (int k = 0; k < 6 + (i * 7) % 30; ++k)
          f << ((k + i) % 3 == 0 ? words[c][(i * 3 + k) % 8] : shared[(i + k) % 4]) << ' ';
      }
    }
    return root;
  }

 private:
  fs::path dir_;
  const testing::TestHosts* hosts_ = nullptr;  // not owned; null: everything on 127.0.0.1
  int coordinator_host_ = -1;
  std::string address_;
  Process coordinator_;
  bool shared_checkpoints_ = true;
  std::vector<Process> workers_;
  std::mutex stubs_mu_;  // guards jobs_ and admin_
  std::shared_ptr<v1::JobService::Stub> jobs_;
  std::shared_ptr<v1::AdminService::Stub> admin_;
};

}  // namespace nightshift::testing_e2e

#endif  // NIGHTSHIFT_TESTS_E2E_CLUSTER_H_
