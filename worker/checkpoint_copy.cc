#include "worker/checkpoint_copy.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/file_access.h"
#include "common/io/atomic_file.h"
#include "common/format/checkpoint_layout.h"
#include "common/format/checkpoint_manifest.h"
#include "common/format/shard.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/model_folder.h"
#include "nightshift/v1/cluster.grpc.pb.h"
#include "worker/confinement.h"

namespace fs = std::filesystem;

namespace nightshift {
namespace {

constexpr uint64_t kMaxManifestBytes = 16 << 20;  // a manifest lists a few files: kilobytes

// "job J step N", for messages.
std::string CopyName(const v1::CheckpointCopy& copy) {
  return "job " + copy.job_id() + " step " + std::to_string(copy.step());
}

// A checkpoint's manifest, parsed: Corruption naming what is wrong, or that it lists no
// file (a version 1 manifest without checksums cannot be copied verified).
Status ParseCopyManifest(const std::string& text, format::CheckpointManifest* m) {
  if (std::string err = format::ParseManifest(text, m); !err.empty()) return Status::Corruption(err);
  if (m->files.empty()) return Status::Corruption("manifest.json lists no files");
  return Status::OK();
}

void RemoveCheckpoint(const fs::path& dir) { format::RemoveCheckpoint(dir.string()); }

// <job_dir>/step-N/manifest.json's text, read as ManifestDigest says; "" when it cannot be.
std::string ManifestText(const std::string& job_dir, int64_t step) {
  // The job's ranks can write its folder: a step folder or manifest that is a link, a
  // FIFO or a huge file is not a checkpoint, and is not followed, waited on or read whole.
  const fs::path dir = fs::path(job_dir) / format::StepDirName(step);
  std::error_code ec;
  if (fs::is_symlink(dir, ec)) return "";
  std::string manifest;
  if (!io::ReadRegularFile((dir / format::kCheckpointManifest).string(), kMaxManifestBytes, &manifest).empty())
    return "";
  return manifest;
}

}  // namespace

std::vector<v1::HeldCheckpoint> NewestCheckpoints(const std::string& root) {
  std::vector<v1::HeldCheckpoint> held;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    const std::string job = d.path().filename().string();
    if (!format::IsJobId(job) || !d.is_directory(ec)) continue;
    const std::vector<int64_t> steps = format::CompleteSteps(d.path().string());
    if (steps.empty()) continue;
    const std::string digest = ManifestDigest(d.path().string(), steps.back());
    if (digest.empty()) continue;
    v1::HeldCheckpoint& h = held.emplace_back();
    h.set_job_id(job);
    h.set_step(steps.back());
    h.set_manifest_sha256(digest);
  }
  return held;
}

std::string ManifestDigest(const std::string& job_dir, int64_t step) {
  const std::string manifest = ManifestText(job_dir, step);
  return manifest.empty() ? "" : crypto::Sha256Hex(manifest);
}

namespace {

// The checkpoint a manifest's text names as export.best's ("best"): step 0 when none.
v1::HeldCheckpoint BestIn(const std::string& manifest) {
  v1::HeldCheckpoint best;
  format::CheckpointManifest m;
  if (!format::ParseManifest(manifest, &m).empty() || m.best_step <= 0) return best;
  best.set_step(m.best_step);
  best.set_manifest_sha256(m.best_manifest_sha256);
  return best;
}

}  // namespace

v1::HeldCheckpoint BestNamedBy(const std::string& job_dir, int64_t step) { return BestIn(ManifestText(job_dir, step)); }

std::vector<int64_t> SetAsideUnverified(const std::string& job_dir, const std::vector<v1::HeldCheckpoint>& records) {
  const std::vector<int64_t> steps = format::CompleteSteps(job_dir);
  // Each manifest read once: the bytes digested are the bytes whose "best" is believed.
  std::map<int64_t, std::string> text_of, digest_of;
  for (const int64_t step : steps) {
    text_of[step] = ManifestText(job_dir, step);
    digest_of[step] = text_of[step].empty() ? "" : crypto::Sha256Hex(text_of[step]);
  }
  const auto listed = [&](const std::vector<v1::HeldCheckpoint>& list, int64_t step) {
    const std::string& digest = digest_of[step];
    return !digest.empty() && std::any_of(list.begin(), list.end(), [&](const auto& v) {
      return v.step() == step && crypto::ConstantTimeEqual(v.manifest_sha256(), digest);
    });
  };
  // export.best's checkpoint, named with its digest by a vouched one (one level: the
  // one it names vouches for nothing more).
  std::vector<v1::HeldCheckpoint> verified = records;
  for (const int64_t step : steps)
    if (listed(records, step))
      if (v1::HeldCheckpoint best = BestIn(text_of[step]); best.step() > 0) verified.push_back(best);
  std::vector<int64_t> moved;
  const fs::path unverified = fs::path(job_dir) / "unverified";
  std::error_code ec;
  // The job's ranks can write the folder: an `unverified` that is a link or a file goes
  // (a link would have the moves below write, as root, where it points).
  if (fs::is_symlink(unverified, ec) || (fs::exists(unverified, ec) && !fs::is_directory(unverified, ec)))
    fs::remove(unverified, ec);
  for (const int64_t step : steps) {
    if (listed(verified, step)) continue;
    const fs::path aside = unverified / format::StepDirName(step);
    fs::remove_all(aside, ec);
    fs::create_directories(aside.parent_path(), ec);
    fs::rename(fs::path(job_dir) / format::StepDirName(step), aside, ec);
    if (ec) {  // cannot move it: remove it, so that nothing resumes from it
      NS_WARN("cannot move " << job_dir << "/" << format::StepDirName(step) << " aside (" << ec.message() << "): removed");
      RemoveCheckpoint(fs::path(job_dir) / format::StepDirName(step));
    }
    moved.push_back(step);
  }
  if (!moved.empty()) io::SyncDirectory(job_dir);
  return moved;
}

Status SendCheckpoint(const std::string& step_dir, int64_t step,
                      const std::function<bool(const v1::ArtifactChunk&)>& write) {
  if (!format::IsComplete(step_dir)) return Status::NotFound("no complete checkpoint at " + step_dir);
  // Every file is opened once, beneath the job's folder (io::ScanFileBeneath): one the
  // job's ranks swap for a link out of it (the worker's token, another job's folder) after
  // any check is not read.
  const std::string job_dir = fs::path(step_dir).parent_path().string();
  std::string manifest;
  if (std::string error = io::ReadFileBeneath({job_dir}, step_dir + "/" + format::kCheckpointManifest,
                                              kMaxManifestBytes, &manifest);
      !error.empty())
    return Status::NotFound(error);
  format::CheckpointManifest parsed;
  if (Status s = ParseCopyManifest(manifest, &parsed); !s.ok()) return Status::Corruption(step_dir + "/" + s.message());
  v1::ArtifactChunk first;
  first.set_file(format::kCheckpointManifest);
  first.set_data(manifest);
  first.set_step(step);
  if (!write(first)) return Status::Cancelled("the reader left");
  for (const auto& [name, entry] : parsed.files)
    NS_RETURN_IF_ERROR(SendFileBeneath(job_dir, step_dir + "/" + name, name, write));
  return Status::OK();
}

CheckpointCopier::CheckpointCopier(Options options)
    : options_(std::move(options)), thread_([this] { Loop(); }) {}

CheckpointCopier::~CheckpointCopier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
  }
  wake_.notify_all();
  thread_.join();
}

void CheckpointCopier::Request(const v1::CheckpointCopy& copy) {
  if (!format::IsJobId(copy.job_id()) || copy.step() <= 0) return;
  const std::vector<int64_t> held = format::CompleteSteps(options_.root + "/" + copy.job_id());
  if (!held.empty() && held.back() >= copy.step()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = queue_.find(copy.job_id());
  if (it != queue_.end() && it->second.step() >= copy.step()) return;
  queue_[copy.job_id()] = copy;
  wake_.notify_all();
}

int64_t CheckpointCopier::copies() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copies_;
}

int64_t CheckpointCopier::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

void CheckpointCopier::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const v1::CheckpointCopy copy = queue_.begin()->second;
    queue_.erase(queue_.begin());
    lock.unlock();
    const Status s = Copy(copy);
    if (!s.ok())
      NS_WARN("checkpoint copy of job " << copy.job_id() << " step " << copy.step() << " from "
                                        << copy.source_worker() << ": " << s.ToString());
    lock.lock();
  }
}

namespace {

// A copy's own folder, <job>/.incoming-step-N, made empty; leftovers of copies cut short
// (a crash, a stopped worker) are swept first.
StatusOr<fs::path> PrepareIncoming(const fs::path& job_dir, int64_t step) {
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (const auto& d : fs::directory_iterator(job_dir, ec))
    if (d.path().filename().string().rfind(".incoming-", 0) == 0) leftovers.push_back(d.path());
  for (const fs::path& d : leftovers) fs::remove_all(d, ec);
  const fs::path incoming = job_dir / (".incoming-" + format::StepDirName(step));
  if (!fs::create_directories(incoming, ec))
    return Status::IOError("cannot create " + incoming.string() + ": " + ec.message());
  return incoming;
}

// One checkpoint's stream written into a folder: the manifest first, then each file it
// lists, whole and in order, streamed to disk, checked against its manifest entry (size,
// SHA-256) and synced. The manifest itself must have the SHA-256 the holder reported to
// the coordinator (`manifest_sha256`): a holder, or anyone between, cannot hand over
// other contents with a manifest made to match. Nothing here waits or talks to the network.
class IncomingCheckpoint {
 public:
  IncomingCheckpoint(fs::path dir, std::string what, int64_t step, std::string manifest_sha256)
      : dir_(std::move(dir)), what_(std::move(what)), step_(step), manifest_sha256_(std::move(manifest_sha256)) {}
  ~IncomingCheckpoint() {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Add(const v1::ArtifactChunk& chunk) {
    if (manifest_.empty()) return Start(chunk);
    if (chunk.file() != name_) {
      if (Status s = CloseFile(); !s.ok()) return s;
      if (!expected_.files.count(chunk.file()) || chunk.offset() != 0)
        return Status::Corruption(what_ + ": unexpected chunk of \"" + chunk.file() + "\"");
      if (Status s = OpenFile(chunk.file()); !s.ok()) return s;
    }
    if (chunk.offset() != static_cast<int64_t>(size_))
      return Status::Corruption(what_ + ": " + name_ + " arrived out of order");
    hasher_.Update(chunk.data().data(), chunk.data().size());
    size_ += chunk.data().size();
    for (size_t at = 0; at < chunk.data().size();) {
      const ssize_t n = ::write(fd_, chunk.data().data() + at, chunk.data().size() - at);
      if (n <= 0) return Status::IOError("cannot write " + (dir_ / name_).string() + ": " + std::strerror(errno));
      at += static_cast<size_t>(n);
    }
    return Status::OK();
  }

  // After the last chunk: every listed file arrived whole; the manifest is written.
  Status Finish() {
    if (manifest_.empty()) return Status::Corruption(what_ + ": nothing arrived");
    if (Status s = CloseFile(); !s.ok()) return s;
    if (!expected_.files.empty())
      return Status::Corruption(what_ + ": " + expected_.files.begin()->first + " did not arrive");
    if (std::string err = io::WriteFileAtomically((dir_ / format::kCheckpointManifest).string(), manifest_);
        !err.empty())
      return Status::IOError(err);
    return Status::OK();
  }

  int64_t bytes() const { return bytes_; }

 private:
  Status Start(const v1::ArtifactChunk& chunk) {
    if (chunk.file() != format::kCheckpointManifest || chunk.step() != step_)
      return Status::Corruption(what_ + ": the stream does not start with its manifest");
    if (manifest_sha256_.empty() || !crypto::ConstantTimeEqual(crypto::Sha256Hex(chunk.data()), manifest_sha256_))
      return Status::Corruption(what_ + ": its manifest is not the one the holder reported (SHA-256 " +
                                (manifest_sha256_.empty() ? std::string("none") : manifest_sha256_) + ")");
    if (Status s = ParseCopyManifest(chunk.data(), &expected_); !s.ok())
      return Status::Corruption(what_ + ": " + s.message());
    for (const auto& [name, f] : expected_.files)
      if (f.sha256.empty()) return Status::Corruption(what_ + ": manifest.json has no SHA-256 for " + name);
    manifest_ = chunk.data();
    return Status::OK();
  }
  Status OpenFile(const std::string& name) {
    fd_ = ::open((dir_ / name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::IOError("cannot create " + (dir_ / name).string() + ": " + std::strerror(errno));
    name_ = name;
    size_ = 0;
    hasher_ = format::FileHasher();
    return Status::OK();
  }
  // The file in progress (if any): closed, checked and synced; off the expected list.
  Status CloseFile() {
    if (name_.empty()) return Status::OK();
    const bool synced = ::fsync(fd_) == 0;
    ::close(fd_);
    fd_ = -1;
    if (std::string err = format::VerifyFile(name_, hasher_.Entry(), expected_.files.at(name_)); !err.empty())
      return Status::Corruption(what_ + ": " + err);
    if (!synced) return Status::IOError("cannot sync " + (dir_ / name_).string());
    bytes_ += static_cast<int64_t>(size_);
    expected_.files.erase(name_);
    name_.clear();
    return Status::OK();
  }

  const fs::path dir_;
  const std::string what_;  // "job J step N", for messages
  const int64_t step_;
  const std::string manifest_sha256_;    // hex, as reported by the holder
  std::string manifest_;                 // its text; empty until the first chunk
  format::CheckpointManifest expected_;  // files not yet complete
  std::string name_;                     // the file being written; empty between files
  int fd_ = -1;
  uint64_t size_ = 0;
  format::FileHasher hasher_;  // of the file being written
  int64_t bytes_ = 0;  // of the completed files
};

// Cancels `ctx` once Touch() has not been called for `stall` on `clock` (looked at
// about once a second of real time). Joined on destruction.
class StallWatchdog {
 public:
  StallWatchdog(const Clock& clock, Clock::Duration stall, grpc::ClientContext* ctx)
      : clock_(clock), stall_(stall), last_(clock.Now()), thread_([this, ctx] { Watch(ctx); }) {}
  ~StallWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Touch() {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = clock_.Now();
  }
  bool stalled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stalled_;
  }

 private:
  void Watch(grpc::ClientContext* ctx) {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::seconds(1), [&] { return done_; })) {
      if (clock_.Now() - last_ > stall_) {
        stalled_ = true;
        ctx->TryCancel();
        return;
      }
    }
  }

  const Clock& clock_;
  const Clock::Duration stall_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Clock::TimePoint last_;                // GUARDED_BY(mu_)
  bool done_ = false, stalled_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;                   // last: starts after the rest
};

}  // namespace

Status CheckpointCopier::Copy(const v1::CheckpointCopy& copy) { return CopyWithBest(copy, /*own_task=*/false); }

Status CheckpointCopier::Fetch(const v1::CheckpointCopy& copy) { return CopyWithBest(copy, /*own_task=*/true); }

Status CheckpointCopier::CopyWithBest(const v1::CheckpointCopy& copy, bool own_task) {
  NS_RETURN_IF_ERROR(CopyInto(copy, own_task, /*exact=*/own_task));
  const v1::HeldCheckpoint best = BestNamedBy((fs::path(options_.root) / copy.job_id()).string(), copy.step());
  if (best.step() <= 0 || best.step() >= copy.step()) return Status::OK();
  v1::CheckpointCopy older = copy;
  older.set_step(best.step());
  older.set_manifest_sha256(best.manifest_sha256());
  if (const Status s = CopyInto(older, own_task, /*exact=*/true); !s.ok())
    NS_WARN("export.best's checkpoint, " << CopyName(older) << ", not copied from worker " << copy.source_worker()
                                          << ": " << s.ToString());
  return Status::OK();
}

Status CheckpointCopier::CopyInto(const v1::CheckpointCopy& copy, bool own_task, bool exact) {
  if (!format::IsJobId(copy.job_id())) return Status::InvalidArgument("job_id: not a job id");
  const fs::path job_dir = fs::path(options_.root) / copy.job_id();
  const std::string what = CopyName(copy);
  if (!own_task && options_.runs_here && options_.runs_here(copy.job_id()))
    return Status::FailedPrecondition(what + ": the job runs on this worker");
  const std::vector<int64_t> held = format::CompleteSteps(job_dir.string());
  // That step held with that manifest (a roll-back writes a step number again), or, unless
  // `exact`, a later one.
  const std::string digest =
      std::count(held.begin(), held.end(), copy.step()) > 0 ? ManifestDigest(job_dir.string(), copy.step()) : "";
  if ((!digest.empty() && (copy.manifest_sha256().empty() || digest == copy.manifest_sha256())) ||
      (!exact && !held.empty() && held.back() > copy.step()))
    return Status::OK();

  NS_RETURN_IF_ERROR(MakeJobFolder(job_dir.string()));  // the job's own from its first file (confinement.h)
  StatusOr<fs::path> incoming = PrepareIncoming(job_dir, copy.step());
  if (!incoming.ok()) return incoming.status();
  IncomingCheckpoint files(incoming.value(), what, copy.step(), copy.manifest_sha256());
  Status s = Receive(copy, [&](const v1::ArtifactChunk& chunk) { return files.Add(chunk); });
  if (s.ok()) s = files.Finish();
  if (s.ok()) s = Commit(copy, incoming.value(), own_task);
  std::error_code ec;
  fs::remove_all(incoming.value(), ec);  // renamed away when committed
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++copies_;
    bytes_ += files.bytes();
  }
  NS_INFO("copied the checkpoint of " << what << " from worker " << copy.source_worker() << " ("
                                      << files.bytes() << " bytes)");
  return Status::OK();
}

Status CheckpointCopier::Receive(const v1::CheckpointCopy& copy,
                                 const std::function<Status(const v1::ArtifactChunk&)>& on_chunk) {
  const std::string what = CopyName(copy);
  auto stub = v1::WorkerFileService::NewStub(grpc::CreateChannel(
      copy.source_address(), options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", std::string("Bearer ") + kCapabilityPrefix + copy.capability());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status::Cancelled("the worker is stopping");
    in_flight_.insert(&ctx);
  }
  v1::ReadCheckpointRequest req;
  req.set_job_id(copy.job_id());
  req.set_step(copy.step());
  Status bad;
  grpc::Status end;
  bool stalled = false;
  {
    // A holder that stops sending (cut off, its disk hung) must not hold every later copy.
    StallWatchdog watchdog(*options_.clock, options_.stall, &ctx);
    auto reader = stub->ReadCheckpoint(&ctx, req);
    v1::ArtifactChunk chunk;
    while (bad.ok() && reader->Read(&chunk)) {
      watchdog.Touch();
      bad = on_chunk(chunk);
    }
    if (!bad.ok()) ctx.TryCancel();
    end = reader->Finish();
    stalled = watchdog.stalled();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(&ctx);
  }
  if (!bad.ok()) return bad;
  if (stalled)
    return Status::Unavailable(what + ": worker " + copy.source_worker() + " sent nothing for " +
                               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options_.stall).count()) +
                               " s");
  if (!end.ok()) {
    const std::string message = what + " from worker " + copy.source_worker() + ": " + end.error_message();
    switch (end.error_code()) {
      case grpc::StatusCode::NOT_FOUND: return Status::NotFound(message);
      case grpc::StatusCode::UNAUTHENTICATED: return Status::Unauthenticated(message);
      case grpc::StatusCode::PERMISSION_DENIED: return Status::PermissionDenied(message);
      default: return Status::Unavailable(message);
    }
  }
  return Status::OK();
}

Status CheckpointCopier::Commit(const v1::CheckpointCopy& copy, const fs::path& incoming, bool own_task) {
  const std::string what = CopyName(copy);
  // Into place, unless the job started here meanwhile: its trainer owns the folder then.
  if (!own_task && options_.runs_here && options_.runs_here(copy.job_id()))
    return Status::FailedPrecondition(what + ": the job started on this worker");
  const fs::path job_dir = incoming.parent_path();
  const fs::path dir = job_dir / format::StepDirName(copy.step());
  std::error_code ec;
  if (fs::exists(dir, ec)) RemoveCheckpoint(dir);  // incomplete, or (exact) of another manifest
  fs::rename(incoming, dir, ec);
  if (ec) return Status::IOError("cannot rename " + incoming.string() + ": " + ec.message());
  if (std::string err = io::WriteFileAtomically((dir / format::kCheckpointComplete).string(),
                                                    std::to_string(copy.step()) + "\n");
      !err.empty()) {
    RemoveCheckpoint(dir);
    return Status::IOError(err);
  }
  io::SyncDirectory(job_dir.string());
  if (own_task) return Status::OK();  // its trainer prunes by keep_last, and keeps export.best's
  const std::vector<int64_t> held = format::CompleteSteps(job_dir.string());
  const int64_t best = held.empty() ? 0 : BestNamedBy(job_dir.string(), held.back()).step();
  for (size_t i = 0; i + options_.keep < held.size(); ++i)
    if (held[i] != best) RemoveCheckpoint(job_dir / format::StepDirName(held[i]));
  return Status::OK();
}

}  // namespace nightshift
