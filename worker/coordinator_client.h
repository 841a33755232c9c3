// CoordinatorClient: how the agent reaches the coordinator, the worker's three calls of
// WorkerService (proto/nightshift/v1/cluster.proto) with errors as Status values. The
// seam between the agent's logic and the network: tests give the agent a fake
// (tests/worker/fake_coordinator_client.h).
#ifndef NIGHTSHIFT_WORKER_COORDINATOR_CLIENT_H_
#define NIGHTSHIFT_WORKER_COORDINATOR_CLIENT_H_

#include <memory>

#include <chrono>

#include "common/status.h"
#include "nightshift/v1/cluster.pb.h"
#include "worker/worker_options.h"

namespace nightshift {

class CoordinatorClient {
 public:
  virtual ~CoordinatorClient() = default;
  virtual Status Register(const v1::RegisterRequest& request, v1::RegisterResponse* response) = 0;
  // NOT_FOUND: the coordinator does not know this worker (it restarted): register again.
  virtual Status Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response) = 0;
  virtual Status ReportTask(const v1::ReportTaskRequest& request, v1::ReportTaskResponse* response) = 0;
  // Each later call waits at most this long (the agent sets it from the coordinator's lease).
  virtual void SetDeadline(std::chrono::milliseconds deadline) = 0;
};

// gRPC to options.coordinator with its TLS and token (a token file or certificate that
// cannot be read is an error naming it). Connects lazily; each call waits at most
// `deadline_seconds` until SetDeadline.
StatusOr<std::unique_ptr<CoordinatorClient>> ConnectToCoordinator(const WorkerOptions& options,
                                                                   int deadline_seconds = 5);

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_COORDINATOR_CLIENT_H_
