// Authentication and roles for the coordinator's RPCs.
//
// Callers send `authorization: Bearer <token>` in the call's metadata. The coordinator
// knows tokens only by their SHA-256 (a token file of lines `<sha256-hex> <role> <user>`),
// and reloads the file when its modification time changes, so tokens can be added and
// revoked without a restart. Roles:
//   admin   every RPC
//   user    JobService on the user's own jobs (ListJobs lists only them)
//   worker  WorkerService only, as the worker its token names (or, by an allocation's
//           token, as that attempt's workers: allocation_tokens.h)
// No token, or an unknown one: UNAUTHENTICATED. A known caller calling what its role may
// not: PERMISSION_DENIED. Without a token file the coordinator runs in insecure mode:
// every caller is an admin with no user name.
#ifndef NIGHTSHIFT_COORDINATOR_AUTH_H_
#define NIGHTSHIFT_COORDINATOR_AUTH_H_

#include <sys/types.h>

#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/crypto/sha256.h"
#include "common/status.h"
#include "coordinator/allocation_tokens.h"

namespace grpc {
class ServerContext;
}

namespace nightshift {

enum class Role { kAdmin, kUser, kWorker };
const char* RoleName(Role role);

// Every RPC the coordinator serves.
enum class Method {
  kSubmitJob, kGetJob, kListJobs, kCancelJob, kWatchJob, kStreamLogs,  // JobService
  kGetArtifacts, kGetJobMetrics, kDeleteJob,
  kSubmitSweep, kGetSweep, kListSweeps, kCancelSweep,
  kRegister, kHeartbeat, kReportTask,                                  // WorkerService
  kListWorkers, kListCache, kEvictCache, kCordonWorker, kDrainWorker,  // AdminService
  kRemoveWorker,
};
const char* MethodName(Method method);

struct Principal {
  Role role = Role::kAdmin;
  std::string user;  // empty in insecure mode
  // A worker by an allocation's token (allocation_tokens.h): user is "<job>-a<attempt>",
  // the prefix of the worker names it may act as.
  std::string allocation_job;
  int allocation_attempt = -1;
  bool allocation() const { return !allocation_job.empty(); }
};

// One token: its SHA-256 (lower-case hex) -> who presents it.
using TokenTable = std::map<std::string, Principal>;

// Parses a token file: one `<sha256-hex> <role> <user>` per line; blank lines and lines
// starting with '#' are ignored. Errors name the line.
StatusOr<TokenTable> ParseTokenFile(const std::string& text);

// SHA-256 of `data`, lower-case hex (what a token file holds for a token).
using crypto::Sha256Hex;

// Whether `who` may call `method`. For job methods, `owner` is the job's owner (users
// may touch their own jobs only); pass nullptr for calls not about one job. Pure.
Status Permit(const Principal& who, Method method, const std::string* owner);

// Whether `who` may submit a job at `priority`: users up to `ceiling`
// (--max-user-priority), admins (and insecure mode) at any. PERMISSION_DENIED naming the
// field and the ceiling. Pure.
Status PermitPriority(const Principal& who, int priority, int ceiling);

class Authenticator {
 public:
  // `token_file` empty: insecure mode. Otherwise the file must parse.
  static StatusOr<std::unique_ptr<Authenticator>> Open(const std::string& token_file);

  bool insecure() const { return token_file_.empty(); }

  // Accept allocations' tokens too (--cluster slurm|kubernetes). Call before serving.
  void TrustAllocations(const AllocationTokens* tokens) { allocations_ = tokens; }

  // Who is calling: from the `authorization` metadata, or UNAUTHENTICATED.
  StatusOr<Principal> Authenticate(const grpc::ServerContext& ctx);

  // Authenticate, then Permit. `owner` as for Permit. Fills *who when non-null.
  Status Authorize(const grpc::ServerContext& ctx, Method method, const std::string* owner = nullptr,
                   Principal* who = nullptr);

 private:
  explicit Authenticator(std::string token_file) : token_file_(std::move(token_file)) {}
  // Re-reads the token file if it changed; keeps the old table if the new file is bad.
  Status ReloadIfChanged();

  const std::string token_file_;  // constant after construction
  const AllocationTokens* allocations_ = nullptr;  // not owned; set before serving

  std::mutex mu_;
  TokenTable tokens_;             // GUARDED_BY(mu_)
  struct timespec mtime_ {};      // GUARDED_BY(mu_), of the file last loaded
  off_t size_ = -1;               // GUARDED_BY(mu_)
  ino_t inode_ = 0;               // GUARDED_BY(mu_)
  std::string last_reload_error_;  // GUARDED_BY(mu_), logged once
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_AUTH_H_
