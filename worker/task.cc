#include "worker/task.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/io/atomic_file.h"
#include "common/format/checkpoint_layout.h"
#include "common/format/progress.h"
#include "common/crypto/sha256.h"
#include "common/log.h"
#include "common/model_folder.h"
#include "tokenizer/folder.h"
#include "worker/assignment.h"
#include "worker/checkpoint_copy.h"
#include "worker/confinement.h"
#include "worker/data_prep.h"
#include "worker/launcher.h"

namespace fs = std::filesystem;

namespace nightshift {
namespace {

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

// Test-only fault injection: NIGHTSHIFT_FAULT_HANG_AT_STEP=N in the WORKER's
// environment makes it SIGSTOP the first rank that reports step N or later (once per
// worker process), which looks exactly like a hung trainer from outside.
bool InjectHangAt(const format::ProgressRecord& r) {
  static const char* const at = std::getenv("NIGHTSHIFT_FAULT_HANG_AT_STEP");
  static std::atomic<bool> injected{false};
  const int64_t step = at == nullptr ? 0 : std::atoll(at);
  return step > 0 && r.event == "step" && r.Number("step") >= static_cast<double>(step) && !injected.exchange(true);
}

// The id of nightshift-prepare among the task's processes (ranks are 0 and up).
constexpr int kPrepareId = -1;

// Processes (threads count) of the job's user a rank may start (RLIMIT_NPROC; root is
// exempt): enough for LibTorch's thread pools, NCCL and Gloo, not a fork bomb.
constexpr uint64_t kRankProcessLimit = 16384;

// The largest tokenizer or config file of a user's model folder the worker reads (Llama
// 3's tokenizer.json is 9 MB).
constexpr uint64_t kMaxModelInput = 64 << 20;

}  // namespace

Task::Task(const WorkerOptions& options, const v1::Assignment& assignment, FeatureCache* cache,
           std::vector<int> gpus, FetchCheckpoint fetch)
    : options_(options),
      assignment_(assignment),
      cache_(cache),
      gpus_(std::move(gpus)),
      fetch_(std::move(fetch)),
      supervisor_({"job " + assignment.task().job_id() + " attempt " + std::to_string(assignment.task().attempt()),
                   options.stop_grace_seconds, options.log_max_bytes, options.log_keep}),
      progress_(assignment.first_rank()) {
  *status_.mutable_task() = assignment.task();
  status_.set_state(v1::TASK_PREPARING);
  status_.set_master_addr(assignment.master_addr());
}

Task::~Task() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void Task::Start() { thread_ = std::thread([this] { Run(); }); }

v1::TaskStatus Task::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  v1::TaskStatus status = status_;
  progress_.Fill(&status);
  return status;
}

int64_t Task::Evaluations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return progress_.evaluations();
}

std::map<int, Task::RankRecords> Task::RankSnapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return progress_.ranks();
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

std::string Task::Refusal() const {
  const std::string& job_id = assignment_.task().job_id();
  const v1::JobSpec& spec = assignment_.spec();
  // The id names folders (job dir, checkpoints): it must not climb out of them.
  if (!format::IsJobId(job_id))
    return "refusing job id '" + job_id + "': not a plain name";
  if (spec.resources().device() == "cuda" && gpus_.empty())
    return "spec.resources.device is cuda but worker " + options_.name +
           " has no GPUs (NVML found none); run it where `nightshift worker list` shows GPUs, or use device auto or cpu";
  const std::pair<const char*, std::string> inputs[] = {{"data.path", spec.data().path()},
                                                         {"model.path", spec.model().path()},
                                                         {"model.init_from", spec.model().init_from()},
                                                         {"model.pretrained", spec.model().pretrained()},
                                                         {"model.adapter.init_from", spec.model().adapter().init_from()}};
  const std::vector<std::string> own = OwnFolders(options_);
  for (const auto& [field, path] : inputs) {
    if (path.empty()) continue;
    // Confinement by default: with no root, no user path (ConfinePath's empty list means
    // anywhere, for nightshift-prepare run by hand; a worker says --allow-any-path).
    if (options_.data_roots.empty())
      return std::string(field) + " '" + path + "': worker " + options_.name +
             " has no --data-root, so it reads no path a job names (its operator gives --data-root DIR, or "
             "--allow-any-path on a single-user machine)";
    std::string real;
    Status confined = ConfinePath(field, path, options_.data_roots, &real);
    if (confined.ok()) confined = OutsideOwnFolders(field, path, real, own);
    if (!confined.ok()) return confined.message();
  }
  return "";
}

namespace {

// The assignment with model.pretrained, model.init_from and model.adapter.init_from as
// Refusal() resolved them
// (absolute, every link followed): the trainer opens their files beneath the data roots
// (ModelConfig::data_roots), so a link swapped in since leads nowhere outside them.
v1::Assignment WithResolvedModelFolders(v1::Assignment a) {
  v1::ModelSpec* m = a.mutable_spec()->mutable_model();
  std::error_code ec;
  if (!m->pretrained().empty())
    if (fs::path real = fs::canonical(m->pretrained(), ec); !ec) m->set_pretrained(real.string());
  if (!m->init_from().empty())
    if (fs::path real = fs::canonical(m->init_from(), ec); !ec) m->set_init_from(real.string());
  if (!m->adapter().init_from().empty())
    if (fs::path real = fs::canonical(m->adapter().init_from(), ec); !ec) m->mutable_adapter()->set_init_from(real.string());
  return a;
}

}  // namespace

std::string Task::JobDir() const {
  return options_.work_dir + "/jobs/" + assignment_.task().job_id() + "/attempt-" +
         std::to_string(assignment_.task().attempt());
}

std::string Task::JudgedFile() const { return JobDir() + "/judged-step"; }

void Task::Judged(int64_t step) {
  std::error_code ec;  // before Run() made the folder no rank waits yet: the next reply repeats it
  if (!WaitsAtRungs() || step <= judged_.load() ||
      !fs::is_directory(JobDir(), ec))
    return;
  if (std::string err = io::WriteFileAtomically(JudgedFile(), std::to_string(step) + "\n"); !err.empty()) {
    NS_WARN("task " << assignment_.task().job_id() << ": " << err);  // the ranks' wait runs out instead
    return;
  }
  judged_ = step;
}

void Task::Run() {
  const std::string& job_id = assignment_.task().job_id();
  const std::string refusal = Refusal();
  if (!refusal.empty()) return Finish(v1::TASK_FAILED, refusal, true);
  const std::string job_dir = JobDir();
  std::error_code ec;
  fs::create_directories(job_dir, ec);
  if (ec) return Finish(v1::TASK_FAILED, "cannot create " + job_dir + ": " + ec.message(), false);
  const std::string checkpoint_dir = CheckpointRoot(options_) + "/" + job_id;
  // Before anything reads or fetches a checkpoint into it: the folder is the job's alone.
  if (Status own = MakeJobFolder(checkpoint_dir); !own.ok()) {
    // Every worker sees the same folder of a shared root: another one would refuse it too.
    const bool retry_cannot_help = own.code() == Status::kPermissionDenied && !options_.checkpoint_root.empty();
    return Finish(v1::TASK_FAILED, "worker " + options_.name + ": " + own.message(), retry_cannot_help);
  }

  nlohmann::json data;
  bool user_error = false;
  std::string prep_error = Prepare(job_dir, &data, &user_error);
  if (!prep_error.empty())
    return Finish(v1::TASK_FAILED, "data preparation on worker " + options_.name + ": " + prep_error, user_error);
  if (stopping()) return Finish(v1::TASK_FAILED, "stopped before start", false);

  if (assignment_.first_rank() == 0 && assignment_.master_addr().empty()) {
    int port = PickFreePort(options_.advertise_host);
    if (port == 0) return Finish(v1::TASK_FAILED, "cannot find a free port for the rendezvous", false);
    std::lock_guard<std::mutex> lock(mu_);
    status_.set_master_addr(options_.advertise_host + ":" + std::to_string(port));
  }
  if (options_.checkpoint_root.empty()) {
    const std::string note = CheckLocalCheckpoints(checkpoint_dir);
    std::lock_guard<std::mutex> lock(mu_);
    status_.set_checkpoint_check(note);
    progress_dirty_ = true;
  }
  nlohmann::json config =
      TrainerConfig(WithResolvedModelFolders(assignment_), data, checkpoint_dir,
                    /*checkpoint_dir_shared=*/!options_.checkpoint_root.empty(), options_.data_roots);
  if (WaitsAtRungs()) {  // an ASHA trial: waits for Judged()
    config["await_steps"] = std::vector<int64_t>(assignment_.await_steps().begin(), assignment_.await_steps().end());
    config["await_epochs"] = std::vector<int64_t>(assignment_.await_epochs().begin(), assignment_.await_epochs().end());
    config["judged_file"] = JudgedFile();
  }
  const std::string config_path = job_dir + "/trainer-config.json";
  std::string err = io::WriteFileAtomically(config_path, config.dump(2));
  if (!err.empty()) return Finish(v1::TASK_FAILED, err, false);
  RunRanks(config_path, job_dir);
}

namespace {

// Whether a rank's last words say an allocation failed (under its RLIMIT_DATA: LibTorch's
// CPU allocator, operator new, or the loader mapping a library).
bool RanOutOfMemory(const std::string& words) {
  for (const char* sign : {"can't allocate memory", "Cannot allocate memory", "std::bad_alloc", "out of memory"})
    if (words.find(sign) != std::string::npos) return true;
  return false;
}

// Reads the user's file `from` once, beneath the data roots (io::ReadFileBeneath: a
// link swapped in after the check is not followed out of them), into *bytes, and writes
// the private copy `to` that nightshift-prepare reads instead. "" or what is wrong.
std::string CopyBeneath(const std::vector<std::string>& roots, const std::string& from, const std::string& to,
                        std::string* bytes) {
  if (std::string err = io::ReadFileBeneath(roots, from, kMaxModelInput, bytes); !err.empty()) return err;
  return io::WriteFileAtomically(to, *bytes);
}

// model.init_from: data preparation uses the folder's tokenizer as it is. It is read once,
// here, without following links below the data roots (io::ReadFileBeneath), checked
// against the folder's checksums.json, and handed to nightshift-prepare as a private copy
// in the job's folder: the cache key names the bytes that were tokenized with, never a
// digest the folder merely claims (an entry poisoned under another folder's digest would
// be served to the next user of that folder).
std::string UseExportedTokenizer(const std::string& folder, const std::vector<std::string>& roots,
                                 const std::string& job_dir, PrepOptions* o) {
  if (folder.empty()) return "";
  std::error_code ec;
  const std::string real = fs::canonical(folder, ec).string();  // confined by Refusal()
  std::string text, tokenizer;
  if (std::string err = io::ReadFileBeneath(roots, real + "/" + kChecksumsFile, 1 << 20, &text); !err.empty())
    return "model.init_from: " + err + ": not an exported model folder";
  auto sums = ParseChecksums(text);
  if (!sums.ok()) return "model.init_from: " + folder + "/" + sums.status().message();
  const auto claimed = sums->find("tokenizer.model");
  if (claimed == sums->end()) return "model.init_from: " + folder + "/checksums.json lists no tokenizer.model";
  o->tokenizer_model = job_dir + "/init-tokenizer.model";
  if (std::string err = CopyBeneath(roots, real + "/tokenizer.model", o->tokenizer_model, &tokenizer); !err.empty())
    return "model.init_from: " + err;
  const std::string sha256 = crypto::Sha256Hex(tokenizer);
  if (claimed->second.algorithm == crypto::kChecksumAlgorithm && sha256 != claimed->second.hex)
    return "model.init_from: " + folder + "/tokenizer.model does not match its sha256 in checksums.json";
  o->tokenizer_sha1 = sha256;
  return "";
}

// model.pretrained: the folder's tokenizer files and config.json, read once here without
// following links below the data roots, go to nightshift-prepare as private copies in the
// job's folder (the cache key hashes the same bytes). The trainer reads the weights.
std::string CopyPretrainedInputs(const std::vector<std::string>& roots, const std::string& job_dir, PrepOptions* o) {
  if (o->pretrained.empty()) return "";
  std::error_code ec;
  const std::string real = fs::canonical(o->pretrained, ec).string();  // confined by Refusal()
  const std::string copy = job_dir + "/pretrained";
  fs::create_directories(copy, ec);
  std::vector<std::string> names = {"config.json"};  // and the tokenizer's files (PretrainedInputs)
  for (const std::string& path : tokenizer::FolderTokenizerInputs(real))
    names.push_back(fs::path(path).filename().string());
  for (const std::string& name : names) {
    std::string bytes;
    if (std::string err = CopyBeneath(roots, real + "/" + name, copy + "/" + name, &bytes); !err.empty())
      return "model.pretrained: " + err;
  }
  o->pretrained = copy;
  return "";
}

}  // namespace

std::string Task::Prepare(const std::string& job_dir, nlohmann::json* data, bool* user_error) {
  PrepOptions o = PrepOptionsFor(assignment_.spec(), options_.data_roots);
  o.max_input_bytes = options_.max_prep_bytes;
  if (std::string err = UseExportedTokenizer(assignment_.spec().model().init_from(), options_.data_roots, job_dir, &o);
      !err.empty()) {
    *user_error = true;
    return err;
  }
  if (std::string err = CopyPretrainedInputs(options_.data_roots, job_dir, &o); !err.empty()) {
    *user_error = true;
    return err;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto key = cache_->KeyFor(o);
  if (!key.ok()) {
    *user_error = key.status().code() == Status::kNotFound || key.status().code() == Status::kInvalidArgument;
    return key.status().message();
  }
  bool hit = false;
  auto build = [&](const std::string& build_dir) { return BuildData(o, build_dir, job_dir); };
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

Status Task::BuildData(const PrepOptions& options, const std::string& build_dir, const std::string& job_dir) {
  std::vector<std::string> argv = PrepareArgs({options, build_dir, options_.prep_threads});
  argv.insert(argv.begin(), BinaryBesideUs("nightshift-prepare"));
  const std::string log_path = job_dir + "/prepare.log";
  NS_RETURN_IF_ERROR(supervisor_.Start({{kPrepareId, argv, {}, log_path}}));
  std::string first_line;  // nightshift-prepare writes one: "prepared" or "error"
  bool got_line = false;
  const Supervisor::Result result = supervisor_.Wait([&](int, const std::string& line) {
    if (!got_line) first_line = line;
    got_line = true;
  });
  const int ws = result.exits.at(0).wait_status;
  format::ProgressRecord rec;
  std::string perr = format::ParseProgressLine(first_line, &rec);
  if (perr.empty() && rec.event == "prepared" && result.exits[0].ok()) return Status::OK();
  std::string detail = rec.event == "error" ? rec.String("message") : TailOfFile(log_path, 3);
  std::string message = "nightshift-prepare " + DescribeWaitStatus(ws) + ": " + detail;
  return WIFEXITED(ws) && WEXITSTATUS(ws) == 2 ? Status::InvalidArgument(message) : Status::Internal(message);
}

void Task::RunRanks(const std::string& config_path, const std::string& job_dir) {
  const std::string trainer = options_.trainer_path.empty() ? BinaryBesideUs("nightshift-trainer") : options_.trainer_path;
  std::string master;
  {
    std::lock_guard<std::mutex> lock(mu_);
    master = status_.master_addr();
  }
  const double memory_gb = assignment_.spec().resources().memory_gb();
  ProcessLimits limits;
  limits.data_bytes = static_cast<uint64_t>(memory_gb * (1ull << 30));
  limits.processes = kRankProcessLimit;
  // The ranks run the user's code: as the job's user, seeing only this job's folders.
  auto view = TrainerViewOf(config_path);
  if (!view.ok()) return Finish(v1::TASK_FAILED, view.status().message(), false);
  std::vector<Supervisor::Child> ranks;
  for (int i = 0; i < assignment_.num_ranks(); ++i) {
    const int rank = assignment_.first_rank() + i;
    ranks.push_back({rank, {trainer, "--config", config_path}, RankEnvironment(assignment_, i, master, gpus_),
                     job_dir + "/rank-" + std::to_string(rank) + ".log", limits, view.value()});
  }
  Status started = supervisor_.Start(ranks);
  if (!started.ok())
    return Finish(v1::TASK_FAILED, "cannot start the trainer " + trainer + ": " + started.message(), false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_.set_state(v1::TASK_RUNNING);
    progress_dirty_ = true;
  }
  const Supervisor::Result result =
      supervisor_.Wait([this](int rank, const std::string& line) { OnProgressLine(rank, line); });
  const Supervisor::Exit* failed = result.failed();
  if (failed == nullptr) return Finish(v1::TASK_SUCCEEDED, "", false);
  std::string detail;
  {
    std::lock_guard<std::mutex> lock(mu_);
    detail = progress_.LastError(failed->id);
  }
  if (detail.empty()) detail = TailOfFile(failed->log_path, 3);
  // The trainer says a restart would fail the same way: the job fails now, with the reason.
  bool permanent =
      WIFEXITED(failed->wait_status) && WEXITSTATUS(failed->wait_status) == format::kTrainerExitPermanent;
  // So does a rank that ran out of the memory its spec allows: not a machine fault.
  std::string limit;
  if (memory_gb > 0 && RanOutOfMemory(detail + "\n" + TailOfFile(failed->log_path, 20))) {
    std::ostringstream gb;
    gb << memory_gb;
    limit = "exceeded its memory limit, resources.memory_gb = " + gb.str() + " (GiB of host memory per rank); ";
    permanent = true;
  }
  Finish(v1::TASK_FAILED,
         "trainer rank " + std::to_string(failed->id) + " " + limit + DescribeWaitStatus(failed->wait_status) +
             (detail.empty() ? "" : ": " + detail) + " (log: " + failed->log_path + ")",
         permanent);
}

std::string Task::CheckLocalCheckpoints(const std::string& dir) {
  const std::vector<v1::HeldCheckpoint> verified(assignment_.verified_checkpoints().begin(),
                                                 assignment_.verified_checkpoints().end());
  std::string note;
  for (const int64_t step : SetAsideUnverified(dir, verified))
    note += (note.empty() ? "set aside local checkpoint step " : ", ") + std::to_string(step);
  if (!note.empty()) note += " (no checkpoint the coordinator recorded has its manifest)";
  const v1::CheckpointCopy& fetch = assignment_.fetch_checkpoint();
  std::vector<int64_t> held = format::CompleteSteps(dir);
  if (fetch_ && fetch.step() > 0 && (held.empty() || held.back() < fetch.step())) {
    const Status s = fetch_(fetch);
    note += std::string(note.empty() ? "" : "; ") + (s.ok() ? "fetched" : "could not fetch") + " step " +
            std::to_string(fetch.step()) + " from worker " + fetch.source_worker() + (s.ok() ? "" : ": " + s.message());
    held = format::CompleteSteps(dir);
  }
  if (note.empty()) return "";
  return note + "; " + (held.empty() ? "no local checkpoint left to resume from" : "the newest local checkpoint is step " + std::to_string(held.back()));
}

void Task::OnProgressLine(int rank, const std::string& line) {
  format::ProgressRecord rec;
  std::string error = format::ParseProgressLine(line, &rec);
  if (!error.empty()) {
    NS_WARN("job " << assignment_.task().job_id() << " rank " << rank << ": " << error);
    return;
  }
  if (InjectHangAt(rec)) {
    NS_WARN("job " << assignment_.task().job_id() << " rank " << rank << ": fault injection: SIGSTOP at step "
                   << rec.Number("step"));
    supervisor_.Signal(rank, SIGSTOP);
  }
  // The digest of the checkpoint this worker's writer reported, read where the worker
  // keeps it (never at a path the trainer names): the coordinator records it.
  const bool own_checkpoint = rec.event == "checkpoint" && rank == assignment_.first_rank();
  const std::string digest =
      own_checkpoint ? ManifestDigest(CheckpointRoot(options_) + "/" + assignment_.task().job_id(),
                                      static_cast<int64_t>(rec.Number("step")))
                     : "";
  std::lock_guard<std::mutex> lock(mu_);
  if (own_checkpoint) status_.set_checkpoint_manifest_sha256(digest);
  if (progress_.Add(rank, rec)) progress_dirty_ = true;
}

}  // namespace nightshift
