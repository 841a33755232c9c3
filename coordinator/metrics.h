// The coordinator's Prometheus metrics. Gauges (jobs by state, queue, workers, slots)
// are read from the Coordinator at scrape time; counters and histograms are fed by the
// Coordinator (through CoordinatorObserver) and the gRPC services.
#ifndef NIGHTSHIFT_COORDINATOR_METRICS_H_
#define NIGHTSHIFT_COORDINATOR_METRICS_H_

#include <grpcpp/support/status.h>
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "coordinator/coordinator.h"

namespace nightshift {

class CoordinatorMetrics : public CoordinatorObserver {
 public:
  CoordinatorMetrics();
  // Registers the registry and a snapshot collector of `c` with `server`. `c` must
  // outlive the server.
  void Serve(MetricsServer* server, const Coordinator* c);

  // CoordinatorObserver.
  void JobScheduled(double queue_wait_seconds) override;
  void JobRestarted(const std::string& reason) override;
  void RecordMovedAside(const std::string& key) override;
  void CheckpointClaimsIgnored(int n) override;

  void SchedulingPass(double seconds);
  void Rpc(const std::string& method, int grpc_code, double seconds);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<SnapshotCollector> snapshot_;
  prometheus::Family<prometheus::Histogram>* queue_wait_;
  prometheus::Family<prometheus::Histogram>* scheduling_;
  prometheus::Family<prometheus::Counter>* restarts_;
  prometheus::Family<prometheus::Counter>* moved_aside_;
  prometheus::Family<prometheus::Counter>* claims_ignored_;
  prometheus::Family<prometheus::Counter>* rpcs_;
  prometheus::Family<prometheus::Histogram>* rpc_seconds_;
};

// Times one RPC and records it on destruction (metrics may be null).
class RpcTimer {
 public:
  RpcTimer(CoordinatorMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method), start_(std::chrono::steady_clock::now()) {}
  grpc::Status Done(grpc::Status s) {
    if (metrics_)
      metrics_->Rpc(method_, s.error_code(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    return s;
  }

 private:
  CoordinatorMetrics* metrics_;
  const char* method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_METRICS_H_
