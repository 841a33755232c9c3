// The credentials of allocations' workers (--cluster slurm|kubernetes with a token file).
// Each attempt's allocation gets its own token,
//   allocation:<job>:<attempt>:<HMAC-SHA256(secret, "<job>:<attempt>") as hex>,
// in its nodes' environment (NIGHTSHIFT_ALLOCATION_TOKEN), never on a command line. It
// opens WorkerService as that attempt's workers only (names "<job>-a<attempt>-..."
// registering that allocation), so a worker token, or one attempt's token, cannot take
// another job's ranks. The coordinator stores no token: it recomputes them from a secret
// of 32 random bytes kept in DATA_DIR/allocation-secret (mode 0600, made at first start),
// so the tokens of running allocations still hold after the coordinator restarts. Other
// keys the coordinator needs across restarts are derived from the same secret (Derive:
// the MLflow experiments' seal, tracking.h).
#ifndef NIGHTSHIFT_COORDINATOR_ALLOCATION_TOKENS_H_
#define NIGHTSHIFT_COORDINATOR_ALLOCATION_TOKENS_H_

#include <optional>
#include <string>

#include "common/client.h"  // kAllocationTokenEnv
#include "common/status.h"

namespace nightshift {

class AllocationTokens {
 public:
  // Reads the secret at `path`, making it first if there is none. An unreadable file, or
  // one that is not 64 hex digits, is an error naming it (a new secret would void the
  // tokens of the allocations running).
  static StatusOr<AllocationTokens> Open(const std::string& path);
  explicit AllocationTokens(std::string secret) : secret_(std::move(secret)) {}

  std::string For(const std::string& job_id, int attempt) const;
  // A key for another use, named by `purpose` (HMAC of the secret over it): never a token.
  std::string Derive(const std::string& purpose) const;

  struct Opens {
    std::string job_id;
    int attempt = 0;
  };
  // What `token` opens; nullopt for anything but a token For made with this secret
  // (compared in constant time).
  std::optional<Opens> Verify(const std::string& token) const;

 private:
  std::string secret_;  // the 32 bytes as 64 hex digits (the HMAC's key)
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_ALLOCATION_TOKENS_H_
