#include "worker/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>

#include "common/client.h"
#include "common/grpc_status.h"
#include "nightshift/v1/cluster.grpc.pb.h"

namespace nightshift {
namespace {

class GrpcCoordinatorClient final : public CoordinatorClient {
 public:
  GrpcCoordinatorClient(const std::shared_ptr<grpc::Channel>& channel, int deadline_seconds)
      : stub_(v1::WorkerService::NewStub(channel)), deadline_ms_(int64_t{deadline_seconds} * 1000) {}

  Status Register(const v1::RegisterRequest& request, v1::RegisterResponse* response) override {
    grpc::ClientContext ctx;
    return FromGrpc(stub_->Register(WithDeadline(&ctx), request, response));
  }
  Status Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response) override {
    grpc::ClientContext ctx;
    return FromGrpc(stub_->Heartbeat(WithDeadline(&ctx), request, response));
  }
  Status ReportTask(const v1::ReportTaskRequest& request, v1::ReportTaskResponse* response) override {
    grpc::ClientContext ctx;
    return FromGrpc(stub_->ReportTask(WithDeadline(&ctx), request, response));
  }
  void SetDeadline(std::chrono::milliseconds deadline) override { deadline_ms_ = deadline.count(); }

 private:
  grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms_.load()));
    return ctx;
  }

  const std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::atomic<int64_t> deadline_ms_;
};

}  // namespace

StatusOr<std::unique_ptr<CoordinatorClient>> ConnectToCoordinator(const WorkerOptions& o, int deadline_seconds) {
  ClientOptions c{o.coordinator, o.token, o.token_file, o.tls_ca, o.tls_cert, o.tls_key};
  NS_RETURN_IF_ERROR(ResolveToken(&c));
  auto channel = MakeChannel(c);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<CoordinatorClient>(new GrpcCoordinatorClient(channel.value(), deadline_seconds));
}

}  // namespace nightshift
