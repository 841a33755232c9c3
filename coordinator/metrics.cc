#include "coordinator/metrics.h"

#include <grpcpp/support/status.h>

#include "common/grpc_status.h"

namespace nightshift {
namespace {
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                  0.05,   0.1,   0.25,   0.5,   1,    2.5};
const prometheus::Histogram::BucketBoundaries kWaitBuckets = {0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400};
}  // namespace

CoordinatorMetrics::CoordinatorMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  queue_wait_ = &prometheus::BuildHistogram()
                     .Name("nightshift_queue_wait_seconds")
                     .Help("Time jobs waited in the queue before being placed")
                     .Register(*registry_);
  scheduling_ = &prometheus::BuildHistogram()
                     .Name("nightshift_scheduling_pass_seconds")
                     .Help("Duration of one pass of the control loop (leases + scheduling)")
                     .Register(*registry_);
  restarts_ = &prometheus::BuildCounter()
                   .Name("nightshift_job_restarts_total")
                   .Help("Job restarts, by reason")
                   .Register(*registry_);
  // Known reasons start at zero, so dashboards and alerts see the series before the
  // first restart.
  for (const char* reason : {"rank_failed", "worker_lost", "worker_restarted"}) restarts_->Add({{"reason", reason}});
  moved_aside_ = &prometheus::BuildCounter()
                      .Name("nightshift_job_store_corrupt_records_total")
                      .Help("Stored records that did not parse at start and were moved aside (corrupt/<key>), by kind")
                      .Register(*registry_);
  for (const char* kind : {"job", "metrics"}) moved_aside_->Add({{"kind", kind}});
  claims_ignored_ = &prometheus::BuildCounter()
                        .Name("nightshift_checkpoint_claims_ignored_total")
                        .Help("Checkpoints workers claimed to hold that no record of the coordinator vouches for "
                              "(not used for placement or copies)")
                        .Register(*registry_);
  claims_ignored_->Add({});
  rpcs_ = &prometheus::BuildCounter()
               .Name("nightshift_rpc_requests_total")
               .Help("gRPC calls served, by method and status code")
               .Register(*registry_);
  rpc_seconds_ = &prometheus::BuildHistogram()
                      .Name("nightshift_rpc_duration_seconds")
                      .Help("gRPC call latency, by method")
                      .Register(*registry_);
}

void CoordinatorMetrics::Serve(MetricsServer* server, const Coordinator* c) {
  snapshot_ = std::make_shared<SnapshotCollector>([c](FamilyBuilder* b) {
    const CoordinatorStats s = c->Stats();
    for (const auto& [state, n] : s.jobs_by_state)
      b->Gauge("nightshift_jobs", "Jobs by state", {{"state", state}}, n);
    b->Gauge("nightshift_queue_length", "Jobs waiting to be placed", {}, s.queue_length);
    b->Gauge("nightshift_queue_oldest_wait_seconds", "How long the oldest queued job has waited", {},
             s.oldest_queued_seconds);
    for (const auto& [state, n] : s.workers_by_state)
      b->Gauge("nightshift_workers", "Workers by state", {{"state", state}}, n);
    b->Gauge("nightshift_slots", "Rank slots of ready workers", {}, s.slots_total);
    b->Gauge("nightshift_slots_used", "Rank slots held by scheduled or running jobs", {}, s.slots_used);
  });
  server->Register(registry_);
  server->Register(snapshot_);
}

void CoordinatorMetrics::JobScheduled(double wait) { queue_wait_->Add({}, kWaitBuckets).Observe(wait); }

void CoordinatorMetrics::JobRestarted(const std::string& reason) {
  restarts_->Add({{"reason", reason}}).Increment();
}

void CoordinatorMetrics::RecordMovedAside(const std::string& key) {
  moved_aside_->Add({{"kind", key.substr(0, key.find('/'))}}).Increment();  // "job/<id>" -> job
}

void CoordinatorMetrics::CheckpointClaimsIgnored(int n) { claims_ignored_->Add({}).Increment(n); }

void CoordinatorMetrics::SchedulingPass(double seconds) {
  scheduling_->Add({}, kLatencyBuckets).Observe(seconds);
}

void CoordinatorMetrics::Rpc(const std::string& method, int code, double seconds) {
  std::string name = GrpcErrorString(grpc::Status(static_cast<grpc::StatusCode>(code), ""));
  name = name.substr(0, name.find(':'));
  rpcs_->Add({{"method", method}, {"code", name}}).Increment();
  rpc_seconds_->Add({{"method", method}}, kLatencyBuckets).Observe(seconds);
}

}  // namespace nightshift
