// Credentials of a worker's file service (worker/file_service.h). The coordinator hands
// each worker registration a fresh random key (RegisterResponse.file_service_key); the
// worker's service accepts `authorization: Bearer <key>` for every call (the coordinator
// relaying logs and models), and `authorization: Bearer cap:<capability>` for
// ReadCheckpoint of one job, the capability being HMAC-SHA256 of "ReadCheckpoint/<job>"
// under the key (a peer worker copying that job's checkpoint: CheckpointCopy.capability).
// So a worker learns no other worker's key, and a capability opens one job's checkpoints
// on one worker until that worker registers again.
#ifndef NIGHTSHIFT_COMMON_FILE_ACCESS_H_
#define NIGHTSHIFT_COMMON_FILE_ACCESS_H_

#include <string>

#include "common/crypto/sha256.h"

namespace nightshift {

inline constexpr char kCapabilityPrefix[] = "cap:";

inline std::string ReadCheckpointCapability(const std::string& key, const std::string& job_id) {
  return crypto::HmacSha256Hex(key, "ReadCheckpoint/" + job_id);
}

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_FILE_ACCESS_H_
