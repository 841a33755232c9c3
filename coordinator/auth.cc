#include "coordinator/auth.h"

#include <grpcpp/server_context.h>
#include <sys/stat.h>

#include <cctype>
#include <fstream>
#include <sstream>

#include "common/client.h"
#include "common/grpc_status.h"
#include "common/log.h"

namespace nightshift {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kAdmin: return "admin";
    case Role::kUser: return "user";
    case Role::kWorker: return "worker";
  }
  return "?";
}

const char* MethodName(Method m) {
  switch (m) {
    case Method::kSubmitJob: return "SubmitJob";
    case Method::kGetJob: return "GetJob";
    case Method::kListJobs: return "ListJobs";
    case Method::kCancelJob: return "CancelJob";
    case Method::kWatchJob: return "WatchJob";
    case Method::kStreamLogs: return "StreamLogs";
    case Method::kGetArtifacts: return "GetArtifacts";
    case Method::kGetJobMetrics: return "GetJobMetrics";
    case Method::kDeleteJob: return "DeleteJob";
    case Method::kSubmitSweep: return "SubmitSweep";
    case Method::kGetSweep: return "GetSweep";
    case Method::kListSweeps: return "ListSweeps";
    case Method::kCancelSweep: return "CancelSweep";
    case Method::kRegister: return "Register";
    case Method::kHeartbeat: return "Heartbeat";
    case Method::kReportTask: return "ReportTask";
    case Method::kListWorkers: return "ListWorkers";
    case Method::kListCache: return "ListCache";
    case Method::kEvictCache: return "EvictCache";
    case Method::kCordonWorker: return "CordonWorker";
    case Method::kDrainWorker: return "DrainWorker";
    case Method::kRemoveWorker: return "RemoveWorker";
  }
  return "?";
}

StatusOr<TokenTable> ParseTokenFile(const std::string& text) {
  TokenTable table;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream fields(line);
    std::string hash, role, user, extra;
    fields >> hash;
    if (hash.empty() || hash[0] == '#') continue;
    fields >> role >> user >> extra;
    const std::string where = "token file line " + std::to_string(n) + ": ";
    if (user.empty() || !extra.empty())
      return Status::InvalidArgument(where + "expected `<sha256-hex> <role> <user>`");
    if (hash.size() != 64)
      return Status::InvalidArgument(where + "the first field must be the token's SHA-256 as 64 hex digits");
    for (char& c : hash) {
      if (!std::isxdigit(static_cast<unsigned char>(c)))
        return Status::InvalidArgument(where + "the first field must be the token's SHA-256 as 64 hex digits");
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    Principal p;
    if (role == "admin") p.role = Role::kAdmin;
    else if (role == "user") p.role = Role::kUser;
    else if (role == "worker") p.role = Role::kWorker;
    else return Status::InvalidArgument(where + "unknown role '" + role + "' (expected admin, user or worker)");
    for (char c : user) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' && c != '@')
        return Status::InvalidArgument(where + "user '" + user + "': use letters, digits and . _ - @");
    }
    if (user.size() > 128) return Status::InvalidArgument(where + "user name longer than 128 characters");
    p.user = user;
    if (!table.emplace(hash, p).second) return Status::InvalidArgument(where + "the same token is listed twice");
  }
  return table;
}

Status Permit(const Principal& who, Method method, const std::string* owner) {
  if (who.role == Role::kAdmin) return Status::OK();
  auto denied = [&](const std::string& why) {
    return Status::PermissionDenied(std::string(RoleName(who.role)) + " " + who.user + " may not call " +
                                    MethodName(method) + ": " + why);
  };
  switch (method) {
    case Method::kSubmitJob:
    case Method::kGetJob:
    case Method::kListJobs:
    case Method::kCancelJob:
    case Method::kWatchJob:
    case Method::kStreamLogs:
    case Method::kGetArtifacts:
    case Method::kGetJobMetrics:
    case Method::kDeleteJob:
    case Method::kSubmitSweep:
    case Method::kGetSweep:
    case Method::kListSweeps:
    case Method::kCancelSweep:
      if (who.role != Role::kUser) return denied("JobService is for users and admins");
      if (owner != nullptr && *owner != who.user) return denied("it belongs to another user");
      return Status::OK();
    case Method::kRegister:
    case Method::kHeartbeat:
    case Method::kReportTask:
      if (who.role != Role::kWorker) return denied("WorkerService is for workers and admins");
      return Status::OK();
    case Method::kListWorkers:
    case Method::kListCache:
    case Method::kEvictCache:
    case Method::kCordonWorker:
    case Method::kDrainWorker:
    case Method::kRemoveWorker:
      return denied("AdminService is for admins");
  }
  return denied("unknown method");
}

Status PermitPriority(const Principal& who, int priority, int ceiling) {
  if (who.role == Role::kAdmin || priority <= ceiling) return Status::OK();
  return Status::PermissionDenied("priority: " + std::to_string(priority) + " is above " + std::to_string(ceiling) +
                                  ", the highest a user may submit (--max-user-priority); ask an admin");
}

StatusOr<std::unique_ptr<Authenticator>> Authenticator::Open(const std::string& token_file) {
  std::unique_ptr<Authenticator> auth(new Authenticator(token_file));
  if (!token_file.empty()) NS_RETURN_IF_ERROR(auth->ReloadIfChanged());
  return auth;
}

Status Authenticator::ReloadIfChanged() {
  struct stat st {};
  if (::stat(token_file_.c_str(), &st) != 0)
    return Status::FailedPrecondition("cannot stat --token-file " + token_file_);
  std::lock_guard<std::mutex> lock(mu_);
  if (st.st_mtim.tv_sec == mtime_.tv_sec && st.st_mtim.tv_nsec == mtime_.tv_nsec && st.st_size == size_ &&
      st.st_ino == inode_)
    return Status::OK();
  std::ifstream in(token_file_);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return Status::FailedPrecondition("cannot read --token-file " + token_file_);
  auto table = ParseTokenFile(text.str());
  if (!table.ok()) return Status::InvalidArgument(token_file_ + ": " + table.status().message());
  const bool first = size_ < 0;
  tokens_ = std::move(table.value());
  mtime_ = st.st_mtim;
  size_ = st.st_size;
  inode_ = st.st_ino;
  NS_INFO("coordinator: " << (first ? "loaded " : "reloaded ") << tokens_.size() << " tokens from "
                          << token_file_);
  return Status::OK();
}

StatusOr<Principal> Authenticator::Authenticate(const grpc::ServerContext& ctx) {
  if (insecure()) return Principal{Role::kAdmin, ""};
  Status reload = ReloadIfChanged();
  if (!reload.ok()) {
    // Keep serving with the tokens we have; say so once per change.
    std::lock_guard<std::mutex> lock(mu_);
    if (reload.message() != last_reload_error_)
      NS_ERROR("coordinator: token file not reloaded, keeping the previous tokens: " << reload.message());
    last_reload_error_ = reload.message();
  }
  auto token = BearerToken(ctx);
  if (!token.ok()) return Status::Unauthenticated(token.status().message() + " (nightshift --token)");
  if (allocations_ != nullptr) {
    if (auto opens = allocations_->Verify(token.value())) {
      Principal p{Role::kWorker, opens->job_id + "-a" + std::to_string(opens->attempt)};
      p.allocation_job = opens->job_id;
      p.allocation_attempt = opens->attempt;
      return p;
    }
  }
  const std::string hash = Sha256Hex(token.value());
  std::lock_guard<std::mutex> lock(mu_);
  auto t = tokens_.find(hash);
  if (t == tokens_.end()) return Status::Unauthenticated("unknown or revoked token");
  return t->second;
}

Status Authenticator::Authorize(const grpc::ServerContext& ctx, Method method, const std::string* owner,
                                Principal* who) {
  auto p = Authenticate(ctx);
  if (!p.ok()) return p.status();
  if (who != nullptr) *who = p.value();
  return Permit(p.value(), method, owner);
}

}  // namespace nightshift
