#include "worker/task.h"

#include <arpa/inet.h>
#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "common/format/atomic_file.h"
#include "common/format/progress.h"
#include "common/log.h"
#include "common/time_util.h"
#include "worker/assignment.h"
#include "worker/data_prep.h"
#include "worker/launcher.h"
#include "worker/rotating_log.h"

namespace fs = std::filesystem;

namespace nightshift {
namespace {

std::string BinaryBesideUs(const std::string& name) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / name).string();
}

// Asks the kernel for a free TCP port on `host` (the rendezvous port of rank 0).
int PickFreePort(const std::string& host) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = htonl(INADDR_ANY);
  int port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

void ApplyProgress(const format::ProgressRecord& r, v1::Progress* p) {
  p->set_step(static_cast<int64_t>(r.Number("step", static_cast<double>(p->step()))));
  p->set_total_steps(static_cast<int64_t>(r.Number("total_steps", static_cast<double>(p->total_steps()))));
  p->set_epoch(static_cast<int32_t>(r.Number("epoch", p->epoch())));
  p->set_loss(r.Number("loss"));
  p->set_lr(r.Number("lr"));
  p->set_tokens_per_second(r.Number("tokens_per_second"));
  p->set_samples_per_second(r.Number("samples_per_second"));
  p->set_step_seconds(r.Number("step_seconds"));
  p->set_data_wait_seconds(r.Number("data_wait_seconds"));
  p->set_padding_efficiency(r.Number("padding_efficiency"));
  p->set_memory_allocated_bytes(static_cast<int64_t>(r.Number("memory_allocated_bytes")));
  p->set_memory_reserved_bytes(static_cast<int64_t>(r.Number("memory_reserved_bytes")));
  p->set_memory_peak_bytes(static_cast<int64_t>(r.Number("memory_peak_bytes")));
  p->set_host_rss_bytes(static_cast<int64_t>(r.Number("host_rss_bytes")));
  p->set_skipped_steps(static_cast<int64_t>(r.Number("skipped_steps")));
  p->set_oom_recoveries(static_cast<int64_t>(r.Number("oom_recoveries")));
  if (p->step() > 0 && p->total_steps() > p->step() && p->step_seconds() > 0)
    p->set_eta_seconds((p->total_steps() - p->step()) * p->step_seconds());
  *p->mutable_updated() = NowTimestamp();
}

// Every thread's stack of a (hung) process, for its log: gdb if it can attach, else
// what the kernel shows in /proc/PID/task/*/stack (root only) and wchan.
std::string ThreadStacks(pid_t pid) {
  const std::string p = std::to_string(pid);
  std::string out = "\n==== nightshift: rank hung; thread stacks of pid " + p + " ====\n";
  std::string gdb;
  if (FILE* f = ::popen(("timeout 30 gdb -p " + p + " -batch -ex 'thread apply all bt' 2>&1").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) gdb.append(buf, n);
    ::pclose(f);
  }
  if (gdb.find("Thread ") != std::string::npos) return out + gdb + "==== end of stacks ====\n";
  out += "(gdb could not attach; kernel stacks follow)\n" + gdb;
  std::error_code ec;
  for (const auto& t : fs::directory_iterator("/proc/" + p + "/task", ec)) {
    std::ifstream comm(t.path() / "comm"), wchan(t.path() / "wchan"), stack(t.path() / "stack");
    std::string name, wait;
    std::getline(comm, name);
    std::getline(wchan, wait);
    out += "thread " + t.path().filename().string() + " (" + name + ") in " + wait + "\n";
    out += std::string(std::istreambuf_iterator<char>(stack), std::istreambuf_iterator<char>());
  }
  return out + "==== end of stacks ====\n";
}

// Test-only fault injection: NIGHTSHIFT_FAULT_HANG_AT_STEP=N in the WORKER's
// environment makes it SIGSTOP the first rank that reports step N or later (once per
// worker process), which looks exactly like a hung trainer from outside.
int64_t FaultHangAtStep() {
  const char* v = std::getenv("NIGHTSHIFT_FAULT_HANG_AT_STEP");
  return v == nullptr ? 0 : std::atoll(v);
}
std::atomic<bool> g_hang_injected{false};

}  // namespace

Task::Task(const WorkerOptions& options, const v1::Assignment& assignment, FeatureCache* cache,
           std::vector<int> gpus)
    : options_(options), assignment_(assignment), cache_(cache), gpus_(std::move(gpus)) {
  *status_.mutable_task() = assignment.task();
  status_.set_state(v1::TASK_PREPARING);
  status_.set_master_addr(assignment.master_addr());
}

Task::~Task() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void Task::Start() { thread_ = std::thread([this] { Run(); }); }

void Task::Stop(bool dump_stacks) {
  if (dump_stacks) dump_stacks_ = true;
  if (stopping_.exchange(true)) return;
  // Hung ranks would not act on SIGTERM: RunRanks dumps their stacks and kills them.
  if (!dump_stacks) SignalRanks(SIGTERM);
}

void Task::SignalRanks(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  for (pid_t pid : pids_) ::kill(-pid, sig);
}

v1::TaskStatus Task::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

std::map<int, Task::RankRecords> Task::RankSnapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rank_records_;
}

bool Task::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_.state() == v1::TASK_SUCCEEDED || status_.state() == v1::TASK_FAILED;
}

void Task::Finish(v1::TaskState state, const std::string& error, bool user_error) {
  std::lock_guard<std::mutex> lock(mu_);
  status_.set_state(state);
  status_.set_error(error);
  status_.set_user_error(user_error);
  progress_dirty_ = true;
}

void Task::Run() {
  const std::string& job_id = assignment_.task().job_id();
  const v1::JobSpec& spec = assignment_.spec();
  // The id names folders (job dir, checkpoints): it must not climb out of them.
  if (job_id.empty() || job_id.size() > 128 || job_id[0] == '.' ||
      job_id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos)
    return Finish(v1::TASK_FAILED, "refusing job id '" + job_id + "': not a plain name", true);
  if (spec.resources().device() == "cuda" && gpus_.empty())
    return Finish(v1::TASK_FAILED,
                  "spec.resources.device is cuda but worker " + options_.name +
                      " has no GPUs (NVML found none); run it where `nightshift worker list` shows GPUs, "
                      "or use device auto or cpu",
                  true);
  if (!spec.model().path().empty()) {
    Status confined = ConfinePath("model.path", spec.model().path(), options_.data_roots);
    if (!confined.ok()) return Finish(v1::TASK_FAILED, confined.message(), true);
  }
  const std::string job_dir = options_.work_dir + "/jobs/" + job_id + "/attempt-" +
                              std::to_string(assignment_.task().attempt());
  std::error_code ec;
  fs::create_directories(job_dir, ec);
  if (ec) return Finish(v1::TASK_FAILED, "cannot create " + job_dir + ": " + ec.message(), false);

  nlohmann::json data;
  bool user_error = false;
  std::string prep_error = Prepare(job_dir, &data, &user_error);
  if (!prep_error.empty())
    return Finish(v1::TASK_FAILED, "data preparation on worker " + options_.name + ": " + prep_error, user_error);
  if (stopping_) return Finish(v1::TASK_FAILED, "stopped before start", false);

  if (assignment_.first_rank() == 0 && assignment_.master_addr().empty()) {
    int port = PickFreePort(options_.advertise_host);
    if (port == 0) return Finish(v1::TASK_FAILED, "cannot find a free port for the rendezvous", false);
    std::lock_guard<std::mutex> lock(mu_);
    status_.set_master_addr(options_.advertise_host + ":" + std::to_string(port));
  }

  // The trainer's config: the spec as protobuf JSON plus what preparation resolved.
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions jopts;
  jopts.preserve_proto_field_names = true;
  jopts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(spec, &spec_json, jopts);
  nlohmann::json config;
  config["job_id"] = job_id;
  config["attempt"] = assignment_.task().attempt();
  config["spec"] = nlohmann::json::parse(spec_json);
  config["data"] = data;
  const std::string ckpt_root = options_.checkpoint_root.empty() ? options_.work_dir + "/checkpoints"
                                                                 : options_.checkpoint_root;
  config["checkpoint_dir"] = fs::absolute(ckpt_root + "/" + job_id).string();
  const std::string config_path = job_dir + "/trainer-config.json";
  std::string err = format::WriteFileAtomically(config_path, config.dump(2));
  if (!err.empty()) return Finish(v1::TASK_FAILED, err, false);
  RunRanks(config_path, job_dir);
}

std::string Task::Prepare(const std::string& job_dir, nlohmann::json* data, bool* user_error) {
  const PrepOptions o = PrepOptionsFor(assignment_.spec(), options_.data_roots);
  const auto t0 = std::chrono::steady_clock::now();
  auto key = cache_->KeyFor(o);
  if (!key.ok()) {
    *user_error = key.status().code() == Status::kNotFound || key.status().code() == Status::kInvalidArgument;
    return key.status().message();
  }
  // The build runs in nightshift-prepare (see worker/data_prep.h for why).
  auto build = [&](const std::string& build_dir) -> Status {
    std::vector<std::string> argv = PrepareArgs({o, build_dir, options_.prep_threads});
    argv.insert(argv.begin(), BinaryBesideUs("nightshift-prepare"));
    auto proc = SpawnProcess(argv, {}, job_dir + "/prepare.log");
    if (!proc.ok()) return proc.status();
    {
      std::lock_guard<std::mutex> lock(mu_);
      pids_.push_back(proc->pid);
    }
    std::string out;
    char buf[4096];
    ssize_t got;
    while ((got = ::read(proc->progress_fd, buf, sizeof(buf))) != 0) {
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) break;
      out.append(buf, static_cast<size_t>(got));
    }
    ::close(proc->progress_fd);
    int ws = 0;
    ::waitpid(proc->pid, &ws, 0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      pids_.clear();
    }
    format::ProgressRecord rec;
    std::string perr = format::ParseProgressLine(out.substr(0, out.find('\n')), &rec);
    if (perr.empty() && rec.event == "prepared" && WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return Status::OK();
    std::string detail = rec.event == "error" ? rec.String("message") : TailOfFile(proc->log_path, 3);
    std::string message = "nightshift-prepare " + DescribeWaitStatus(ws) + ": " + detail;
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 2 ? Status::InvalidArgument(message) : Status::Internal(message);
  };
  bool hit = false;
  auto lease = cache_->Acquire(key.value(), o.path, build, &hit);
  if (!lease.ok()) {
    *user_error = lease.status().code() == Status::kInvalidArgument;
    return lease.status().message();
  }
  lease_ = lease.value();
  std::ifstream in(lease_->dir() + "/" + kMetaFile);
  *data = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!data->is_object()) return "cannot read " + lease_->dir() + "/" + kMetaFile;
  (*data)["train_shard"] = lease_->dir() + "/" + kTrainShard;
  (*data)["val_shard"] = lease_->dir() + "/" + kValShard;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_.set_cache_key(key.value());
    status_.set_cache_hit(hit);
    status_.set_prepare_seconds(seconds);
  }
  NS_INFO("job " << assignment_.task().job_id() << ": data " << (hit ? "from cache" : "built") << " ("
                 << key.value() << ") in " << seconds << " s");
  return "";
}

void Task::RunRanks(const std::string& config_path, const std::string& job_dir) {
  const std::string trainer = options_.trainer_path.empty() ? BinaryBesideUs("nightshift-trainer") : options_.trainer_path;
  std::string master;
  {
    std::lock_guard<std::mutex> lock(mu_);
    master = status_.master_addr();
  }
  const size_t colon = master.rfind(':');
  struct Rank {
    int rank;
    ChildProcess proc;
    std::string buffer;       // partial progress line
    std::string last_error;   // from its "error" event
    int wait_status = 0;
    bool exited = false;
    std::unique_ptr<RotatingLog> log;  // its stdout and stderr
  };
  std::vector<Rank> ranks;
  for (int i = 0; i < assignment_.num_ranks(); ++i) {
    const int rank = assignment_.first_rank() + i;
    std::map<std::string, std::string> env = {
        {"RANK", std::to_string(rank)},
        {"LOCAL_RANK", std::to_string(i)},
        {"WORLD_SIZE", std::to_string(assignment_.world_size())},
        {"LOCAL_WORLD_SIZE", std::to_string(assignment_.num_ranks())},
        {"MASTER_ADDR", master.substr(0, colon)},
        {"MASTER_PORT", colon == std::string::npos ? "" : master.substr(colon + 1)},
        {"NIGHTSHIFT_JOB_ID", assignment_.task().job_id()}};
    // Each rank sees only its own GPU (so every rank's device is cuda:0).
    if (i < static_cast<int>(gpus_.size())) env["CUDA_VISIBLE_DEVICES"] = std::to_string(gpus_[i]);
    auto proc = SpawnProcess({trainer, "--config", config_path}, env, /*log_path=*/"");
    if (!proc.ok()) {
      SignalRanks(SIGKILL);
      for (auto& r : ranks) ::waitpid(r.proc.pid, nullptr, 0);
      return Finish(v1::TASK_FAILED, "cannot start the trainer " + trainer + ": " + proc.status().message(), false);
    }
    const std::string log_path = job_dir + "/rank-" + std::to_string(rank) + ".log";
    ranks.push_back({rank, proc.value(), "", "", 0, false,
                     std::make_unique<RotatingLog>(log_path, options_.log_max_bytes, options_.log_keep)});
    ranks.back().proc.log_path = log_path;
    std::lock_guard<std::mutex> lock(mu_);
    pids_.push_back(proc->pid);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_.set_state(v1::TASK_RUNNING);
    progress_dirty_ = true;
  }
  if (stopping_) SignalRanks(SIGTERM);

  // Follow the progress and output pipes until every rank has closed them and exited.
  std::string first_failure;
  bool stacks_dumped = false;
  const int64_t hang_at_step = FaultHangAtStep();
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  size_t open_pipes = 2 * ranks.size();
  while (open_pipes > 0) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < ranks.size(); ++i) {
      for (int fd : {ranks[i].proc.progress_fd, ranks[i].proc.output_fd}) {
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        which.push_back(i);
      }
    }
    int n = ::poll(fds.data(), fds.size(), 200);
    if (stopping_ && stop_deadline == std::chrono::steady_clock::time_point::max())
      stop_deadline = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(options_.stop_grace_seconds * 1000));
    if (std::chrono::steady_clock::now() > stop_deadline) SignalRanks(SIGKILL);
    if (dump_stacks_ && !stacks_dumped) {
      stacks_dumped = true;
      for (auto& r : ranks) {
        if (r.exited) continue;
        // Appended (O_APPEND, like the rank's own output) to the rank's log.
        std::ofstream(r.proc.log_path, std::ios::app) << ThreadStacks(r.proc.pid);
      }
      NS_WARN("job " << assignment_.task().job_id() << ": ranks hung; stacks written to their logs, killing them");
      SignalRanks(SIGKILL);
    }
    // A rank that died without closing its pipe (its children hold it) is reaped here.
    for (auto& r : ranks) {
      if (!r.exited && ::waitpid(r.proc.pid, &r.wait_status, WNOHANG) == r.proc.pid) {
        r.exited = true;
        bool ok = WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0;
        if (!ok && first_failure.empty() && !stopping_) {
          first_failure = "rank " + std::to_string(r.rank);
          // Peers would wait in a collective for it: stop them now.
          stopping_ = true;
          SignalRanks(SIGTERM);
        }
      }
    }
    if (n <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& r = ranks[which[k]];
      char buf[65536];
      const bool output = fds[k].fd == r.proc.output_fd;
      ssize_t got = ::read(fds[k].fd, buf, sizeof(buf));
      if (got <= 0) {
        ::close(fds[k].fd);
        (output ? r.proc.output_fd : r.proc.progress_fd) = -1;
        --open_pipes;
        continue;
      }
      if (output) {
        r.log->Write(buf, static_cast<size_t>(got));
        continue;
      }
      r.buffer.append(buf, static_cast<size_t>(got));
      size_t nl;
      while ((nl = r.buffer.find('\n')) != std::string::npos) {
        std::string line = r.buffer.substr(0, nl);
        r.buffer.erase(0, nl + 1);
        format::ProgressRecord rec;
        std::string perr = format::ParseProgressLine(line, &rec);
        if (!perr.empty()) {
          NS_WARN("job " << assignment_.task().job_id() << " rank " << r.rank << ": " << perr);
          continue;
        }
        if (rec.event == "error") r.last_error = rec.String("message");
        if (hang_at_step > 0 && rec.event == "step" && rec.Number("step") >= static_cast<double>(hang_at_step) &&
            !g_hang_injected.exchange(true)) {
          NS_WARN("job " << assignment_.task().job_id() << " rank " << r.rank
                         << ": fault injection: SIGSTOP at step " << rec.Number("step"));
          ::kill(r.proc.pid, SIGSTOP);
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (rec.event == "step") rank_records_[r.rank].step = rec;
        if (rec.event == "checkpoint") rank_records_[r.rank].checkpoint = rec;
        if (r.rank != assignment_.first_rank()) continue;  // the lowest local rank speaks for the task
        if (rec.event == "step" || rec.event == "start") {
          ApplyProgress(rec, status_.mutable_progress());
        } else if (rec.event == "checkpoint") {
          status_.set_checkpoint_step(static_cast<int64_t>(rec.Number("step")));
          status_.set_checkpoint_path(rec.String("path"));
        } else if (rec.event == "eval" || rec.event == "done") {
          for (const auto& [k, v] : rec.numbers)  // NaN: not applicable (perplexity of a classifier)
            if ((k.rfind("val_", 0) == 0 || k == "train_seconds") && !std::isnan(v)) (*status_.mutable_metrics())[k] = v;
        }
        progress_dirty_ = true;
      }
    }
  }
  for (auto& r : ranks) {
    if (!r.exited) ::waitpid(r.proc.pid, &r.wait_status, 0);
    r.exited = true;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pids_.clear();
  }
  // The first rank that failed is the cause; the others were stopped because of it.
  for (auto& r : ranks) {
    bool ok = WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0;
    if (ok) continue;
    if (!first_failure.empty() && first_failure != "rank " + std::to_string(r.rank)) continue;
    std::string detail = r.last_error;
    if (detail.empty()) detail = TailOfFile(r.proc.log_path, 3);
    return Finish(v1::TASK_FAILED,
                  "trainer rank " + std::to_string(r.rank) + " " + DescribeWaitStatus(r.wait_status) +
                      (detail.empty() ? "" : ": " + detail) + " (log: " + r.proc.log_path + ")",
                  false);
  }
  Finish(v1::TASK_SUCCEEDED, "", false);
}

}  // namespace nightshift
