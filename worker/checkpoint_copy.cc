#include "worker/checkpoint_copy.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/format/atomic_file.h"
#include "common/format/checkpoint_layout.h"
#include "common/format/shard.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/model_folder.h"
#include "nightshift/v1/cluster.grpc.pb.h"

namespace fs = std::filesystem;

namespace nightshift {
namespace {

constexpr size_t kChunkBytes = 1 << 20;
constexpr int kStallSeconds = 60;  // a copy with no chunk for this long is cancelled

struct FileSum {
  uint64_t bytes = 0;
  std::string fnv1a64;  // decimal, as the trainer's manifest records it
};

// The manifest's "files": plain names with their sums; Corruption naming what is wrong.
StatusOr<std::map<std::string, FileSum>> ManifestFiles(const std::string& manifest) {
  const nlohmann::json m = nlohmann::json::parse(manifest, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("files") || !m["files"].is_object())
    return Status::Corruption("manifest.json is not a checkpoint manifest (no \"files\")");
  std::map<std::string, FileSum> files;
  for (const auto& [name, f] : m["files"].items()) {
    if (!IsPlainFileName(name) || name == format::kCheckpointComplete || name == format::kCheckpointManifest)
      return Status::Corruption("manifest.json lists a file named \"" + name + "\"");
    if (!f.is_object() || !f.contains("bytes") || !f["bytes"].is_number_unsigned() || !f.contains("fnv1a64") ||
        !f["fnv1a64"].is_string())
      return Status::Corruption("manifest.json: " + name + " has no bytes and fnv1a64");
    files[name] = {f["bytes"].get<uint64_t>(), f["fnv1a64"].get<std::string>()};
  }
  return files;
}

StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void RemoveCheckpoint(const fs::path& dir) { format::RemoveCheckpoint(dir.string()); }

}  // namespace

bool IsJobId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

std::vector<v1::HeldCheckpoint> NewestCheckpoints(const std::string& root) {
  std::vector<v1::HeldCheckpoint> held;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    const std::string job = d.path().filename().string();
    if (!IsJobId(job) || !d.is_directory(ec)) continue;
    const std::vector<int64_t> steps = format::CompleteSteps(d.path().string());
    if (steps.empty()) continue;
    v1::HeldCheckpoint& h = held.emplace_back();
    h.set_job_id(job);
    h.set_step(steps.back());
  }
  return held;
}

Status SendCheckpoint(const std::string& step_dir, int64_t step,
                      const std::function<bool(const v1::ArtifactChunk&)>& write) {
  std::error_code ec;
  if (!fs::exists(fs::path(step_dir) / format::kCheckpointComplete, ec))
    return Status::NotFound("no complete checkpoint at " + step_dir);
  auto manifest = ReadFile(fs::path(step_dir) / format::kCheckpointManifest);
  if (!manifest.ok()) return manifest.status();
  auto files = ManifestFiles(manifest.value());
  if (!files.ok()) return Status::Corruption(step_dir + "/" + files.status().message());
  v1::ArtifactChunk first;
  first.set_file(format::kCheckpointManifest);
  first.set_data(manifest.value());
  first.set_step(step);
  if (!write(first)) return Status::Cancelled("the reader left");
  std::vector<char> buf(kChunkBytes);
  for (const auto& [name, sum] : files.value()) {
    const fs::path path = fs::path(step_dir) / name;
    if (fs::is_symlink(path, ec) || !fs::is_regular_file(path, ec))
      return Status::NotFound(path.string() + " is not a regular file");
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::IOError("cannot read " + path.string());
    int64_t offset = 0;
    do {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const std::streamsize got = in.gcount();
      if (got <= 0 && offset > 0) break;
      v1::ArtifactChunk chunk;
      chunk.set_file(name);
      chunk.set_offset(offset);
      chunk.set_data(buf.data(), static_cast<size_t>(std::max<std::streamsize>(got, 0)));
      offset += got;
      if (!write(chunk)) return Status::Cancelled("the reader left");
    } while (in);
  }
  return Status::OK();
}

CheckpointCopier::CheckpointCopier(Options options)
    : options_(std::move(options)), thread_([this] { Loop(); }) {}

CheckpointCopier::~CheckpointCopier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  wake_.notify_all();
  thread_.join();
}

void CheckpointCopier::Request(const v1::CheckpointCopy& copy) {
  if (!IsJobId(copy.job_id()) || copy.step() <= 0) return;
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

Status CheckpointCopier::Copy(const v1::CheckpointCopy& copy) {
  if (!IsJobId(copy.job_id())) return Status::InvalidArgument("job_id: not a job id");
  const fs::path job_dir = fs::path(options_.root) / copy.job_id();
  const std::string what = "job " + copy.job_id() + " step " + std::to_string(copy.step());
  if (options_.runs_here && options_.runs_here(copy.job_id()))
    return Status::FailedPrecondition(what + ": the job runs on this worker");
  std::vector<int64_t> held = format::CompleteSteps(job_dir.string());
  if (!held.empty() && held.back() >= copy.step()) return Status::OK();

  // Leftovers of copies cut short (a crash, a stopped worker) go first.
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (const auto& d : fs::directory_iterator(job_dir, ec))
    if (d.path().filename().string().rfind(".incoming-", 0) == 0) leftovers.push_back(d.path());
  for (const fs::path& d : leftovers) fs::remove_all(d, ec);
  const fs::path incoming = job_dir / (".incoming-" + format::StepDirName(copy.step()));
  if (!fs::create_directories(incoming, ec))
    return Status::IOError("cannot create " + incoming.string() + ": " + ec.message());
  auto fail = [&](Status s) {
    fs::remove_all(incoming, ec);
    return s;
  };

  auto stub = v1::WorkerLogService::NewStub(grpc::CreateChannel(
      copy.source_address(), options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return fail(Status::Cancelled("the worker is stopping"));
    in_flight_ = &ctx;
  }
  // A holder that stops sending (cut off, its disk hung) must not hold every later copy:
  // no chunk for kStallSeconds cancels the call.
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  bool done = false, stalled = false;
  auto last_chunk = std::chrono::steady_clock::now();
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(watch_mu);
    while (!watch_cv.wait_for(lock, std::chrono::seconds(1), [&] { return done; })) {
      if (std::chrono::steady_clock::now() - last_chunk > std::chrono::seconds(kStallSeconds)) {
        stalled = true;
        ctx.TryCancel();
        return;
      }
    }
  });
  v1::ReadCheckpointRequest req;
  req.set_job_id(copy.job_id());
  req.set_step(copy.step());
  auto reader = stub->ReadCheckpoint(&ctx, req);
  // Files arrive whole and in order; each is streamed to disk, then checked against the
  // manifest (size, FNV-1a 64) and synced.
  std::map<std::string, FileSum> files;
  std::string manifest, name;
  uint64_t size = 0, hash = 0;
  int fd = -1;
  int64_t total = 0;
  Status bad;
  auto finish_file = [&]() -> Status {
    if (name.empty()) return Status::OK();
    const FileSum& sum = files.at(name);
    const bool synced = ::fsync(fd) == 0;
    ::close(fd);
    fd = -1;
    if (size != sum.bytes)
      return Status::Corruption(what + ": " + name + " arrived with " + std::to_string(size) + " of " +
                                std::to_string(sum.bytes) + " bytes");
    if (std::to_string(hash) != sum.fnv1a64)
      return Status::Corruption(what + ": " + name + " does not match its checksum in manifest.json");
    if (!synced) return Status::IOError("cannot sync " + (incoming / name).string());
    total += static_cast<int64_t>(size);
    files.erase(name);
    name.clear();
    return Status::OK();
  };
  v1::ArtifactChunk chunk;
  bool first = true;
  while (bad.ok() && reader->Read(&chunk)) {
    {
      std::lock_guard<std::mutex> lock(watch_mu);
      last_chunk = std::chrono::steady_clock::now();
    }
    if (first) {
      first = false;
      if (chunk.file() != format::kCheckpointManifest || chunk.step() != copy.step()) {
        bad = Status::Corruption(what + ": the stream does not start with its manifest");
        break;
      }
      manifest = chunk.data();
      auto parsed = ManifestFiles(manifest);
      if (!parsed.ok()) bad = parsed.status();
      else files = std::move(parsed.value());
      continue;
    }
    if (chunk.file() != name) {
      bad = finish_file();
      if (!bad.ok()) break;
      if (!files.count(chunk.file()) || chunk.offset() != 0) {
        bad = Status::Corruption(what + ": unexpected chunk of \"" + chunk.file() + "\"");
        break;
      }
      name = chunk.file();
      size = 0;
      hash = format::StableHash64(nullptr, 0);
      fd = ::open((incoming / name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        bad = Status::IOError("cannot create " + (incoming / name).string() + ": " + std::strerror(errno));
        name.clear();
        break;
      }
    }
    if (chunk.offset() != static_cast<int64_t>(size)) {
      bad = Status::Corruption(what + ": " + name + " arrived out of order");
      break;
    }
    hash = format::StableHash64(chunk.data().data(), chunk.data().size(), hash);
    size += chunk.data().size();
    for (size_t at = 0; at < chunk.data().size();) {
      const ssize_t n = ::write(fd, chunk.data().data() + at, chunk.data().size() - at);
      if (n <= 0) {
        bad = Status::IOError("cannot write " + (incoming / name).string() + ": " + std::strerror(errno));
        break;
      }
      at += static_cast<size_t>(n);
    }
  }
  if (!bad.ok()) ctx.TryCancel();
  const grpc::Status end = reader->Finish();
  {
    std::lock_guard<std::mutex> lock(watch_mu);
    done = true;
  }
  watch_cv.notify_all();
  watchdog.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = nullptr;
  }
  if (!bad.ok()) {
    if (fd >= 0) ::close(fd);
    return fail(bad);
  }
  if (stalled)
    return fail(Status::Unavailable(what + ": worker " + copy.source_worker() + " sent nothing for " +
                                    std::to_string(kStallSeconds) + " s"));
  if (!end.ok()) {
    const std::string message = what + " from worker " + copy.source_worker() + ": " + end.error_message();
    return fail(end.error_code() == grpc::StatusCode::NOT_FOUND ? Status::NotFound(message)
                                                                 : Status::Unavailable(message));
  }
  if (first) return fail(Status::Corruption(what + ": nothing arrived"));
  if (Status s = finish_file(); !s.ok()) return fail(s);
  if (!files.empty()) return fail(Status::Corruption(what + ": " + files.begin()->first + " did not arrive"));
  if (std::string err = format::WriteFileAtomically((incoming / format::kCheckpointManifest).string(), manifest);
      !err.empty())
    return fail(Status::IOError(err));

  // Into place, unless the job started here meanwhile: its trainer owns the folder then.
  if (options_.runs_here && options_.runs_here(copy.job_id()))
    return fail(Status::FailedPrecondition(what + ": the job started on this worker"));
  const fs::path dir = job_dir / format::StepDirName(copy.step());
  if (fs::exists(dir, ec)) RemoveCheckpoint(dir);  // incomplete: COMPLETE steps returned above
  fs::rename(incoming, dir, ec);
  if (ec) return fail(Status::IOError("cannot rename " + incoming.string() + ": " + ec.message()));
  if (std::string err = format::WriteFileAtomically((dir / format::kCheckpointComplete).string(),
                                                    std::to_string(copy.step()) + "\n");
      !err.empty()) {
    RemoveCheckpoint(dir);
    return Status::IOError(err);
  }
  format::SyncDirectory(job_dir.string());
  held = format::CompleteSteps(job_dir.string());
  for (size_t i = 0; i + options_.keep < held.size(); ++i) RemoveCheckpoint(job_dir / format::StepDirName(held[i]));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++copies_;
    bytes_ += total;
  }
  NS_INFO("copied the checkpoint of " << what << " from worker " << copy.source_worker() << " (" << total
                                      << " bytes)");
  return Status::OK();
}

}  // namespace nightshift
