#include "worker/file_service.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/file_access.h"
#include "common/crypto/sha256.h"
#include "common/grpc_status.h"
#include "common/format/checkpoint_layout.h"
#include "common/model_folder.h"
#include "worker/checkpoint_copy.h"

namespace fs = std::filesystem;

namespace nightshift {

void FileServiceAuth::SetKey(std::string key) {
  std::lock_guard<std::mutex> lock(mu_);
  key_ = std::move(key);
}

Status FileServiceAuth::Check(const grpc::ServerContext& ctx, const std::string& checkpoint_job) const {
  auto token = BearerToken(ctx);
  if (!token.ok())
    return Status::Unauthenticated("this worker's files are for the coordinator and its peers: " +
                                   token.status().message());
  const std::string& presented = token.value();
  std::lock_guard<std::mutex> lock(mu_);
  if (key_.empty()) return Status::Unauthenticated("this worker has not registered with a coordinator yet");
  if (crypto::ConstantTimeEqual(presented, key_)) return Status::OK();
  if (presented.rfind(kCapabilityPrefix, 0) == 0) {
    const std::string capability = presented.substr(sizeof(kCapabilityPrefix) - 1);
    if (!checkpoint_job.empty() && crypto::ConstantTimeEqual(capability, ReadCheckpointCapability(key_, checkpoint_job)))
      return Status::OK();
    return Status::PermissionDenied("the capability presented does not open " +
                                    (checkpoint_job.empty() ? std::string("this method") : "job " + checkpoint_job));
  }
  return Status::Unauthenticated("wrong or outdated credentials for this worker's files");
}

grpc::Status FileServiceImpl::ReadLog(grpc::ServerContext* ctx, const v1::ReadLogRequest* req,
                                     grpc::ServerWriter<v1::LogChunk>* writer) {
  if (Status s = auth_->Check(*ctx, ""); !s.ok()) return ToGrpc(s);
  if (!format::IsJobId(req->job_id()))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: not a job id");
  if (req->rank() < 0) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "rank: must be >= 0");
  // The latest attempt this worker ran.
  const fs::path job_dir = fs::path(work_dir_) / "jobs" / req->job_id();
  int latest = -1;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(job_dir, ec)) {
    const std::string name = d.path().filename().string();
    if (name.rfind("attempt-", 0) == 0) latest = std::max(latest, std::atoi(name.c_str() + 8));
  }
  const std::string path =
      (job_dir / ("attempt-" + std::to_string(latest)) / ("rank-" + std::to_string(req->rank()) + ".log")).string();
  if (latest < 0 || !fs::exists(path))
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no log of rank " + std::to_string(req->rank()) + " of job " + req->job_id() + " here");
  std::ifstream in(path, std::ios::binary);
  int64_t offset = 0;
  std::vector<char> buf(64 << 10);
  int idle_polls = 0;
  while (!ctx->IsCancelled()) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got > 0) {
      offset += got;
      v1::LogChunk chunk;
      chunk.set_data(buf.data(), static_cast<size_t>(got));
      if (!writer->Write(chunk)) return grpc::Status::OK;
      idle_polls = 0;
      continue;
    }
    if (!req->follow()) return grpc::Status::OK;
    // At the end: wait for more, reopen after a rotation, stop once the rank is gone.
    if (!is_running_(req->job_id()) && ++idle_polls > 3) return grpc::Status::OK;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && st.st_size < offset) {
      in = std::ifstream(path, std::ios::binary);
      offset = 0;
    } else {
      in.clear();
    }
  }
  return grpc::Status::OK;
}

grpc::Status FileServiceImpl::ReadModel(grpc::ServerContext* ctx, const v1::ReadModelRequest* req,
                                       grpc::ServerWriter<v1::ArtifactChunk>* writer) {
  if (Status s = auth_->Check(*ctx, ""); !s.ok()) return ToGrpc(s);
  if (!format::IsJobId(req->job_id()))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: not a job id");
  if (req->step() < 0) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "step: must be 0 or more");
  if (checkpoint_root_.empty())
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "this worker keeps no checkpoints");
  // The folder is named by the job id and the step alone, and SendModelFolder sends only
  // the plain names checksums.json lists, regular files, no links: nothing outside it is read.
  if (fs::is_symlink(checkpoint_root_ + "/" + req->job_id()))
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "the checkpoint folder of job " + req->job_id() + " is a link");
  auto dir = exporter_.FolderAt(req->job_id(), req->step());
  if (!dir.ok()) return ToGrpc(dir.status());
  if (fs::is_symlink(dir.value()))
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "the model folder of job " + req->job_id() + " is a link");
  Status s = SendModelFolder(dir.value(), (fs::path(checkpoint_root_) / req->job_id()).string(), req->step(),
                             [&](const v1::ArtifactChunk& chunk) {
    return !ctx->IsCancelled() && writer->Write(chunk);
  });
  return ToGrpc(s);
}

grpc::Status FileServiceImpl::ReadCheckpoint(grpc::ServerContext* ctx, const v1::ReadCheckpointRequest* req,
                                            grpc::ServerWriter<v1::ArtifactChunk>* writer) {
  if (Status s = auth_->Check(*ctx, req->job_id()); !s.ok()) return ToGrpc(s);
  if (!format::IsJobId(req->job_id()))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: not a job id");
  if (req->step() <= 0) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "step: must be 1 or more");
  if (checkpoint_root_.empty())
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "this worker keeps no checkpoints");
  // The folder is named by the job id and the step alone, and SendCheckpoint sends only
  // the plain names its manifest lists, regular files, each opened beneath the job's folder
  // (a link swapped in after these checks is not followed out of it): nothing outside it is read.
  const fs::path job_dir = fs::path(checkpoint_root_) / req->job_id();
  const fs::path dir = job_dir / format::StepDirName(req->step());
  if (fs::is_symlink(job_dir) || fs::is_symlink(dir))
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "the checkpoint folder of job " + req->job_id() + " is a link");
  Status s = SendCheckpoint(dir.string(), req->step(), [&](const v1::ArtifactChunk& chunk) {
    return !ctx->IsCancelled() && writer->Write(chunk);
  });
  return ToGrpc(s);
}

}  // namespace nightshift
