#include "common/grpc_status.h"

namespace nightshift {

std::string GrpcErrorString(const grpc::Status& s) {
  static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                 "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                                 "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                 "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  int code = static_cast<int>(s.error_code());
  std::string name = code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
  return name + ": " + s.error_message();
}

Status FromGrpc(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::OK: return Status::OK();
    case grpc::StatusCode::NOT_FOUND: return Status::NotFound(s.error_message());
    case grpc::StatusCode::UNAVAILABLE: return Status::Unavailable(s.error_message());
    case grpc::StatusCode::DEADLINE_EXCEEDED: return Status::DeadlineExceeded(s.error_message());
    case grpc::StatusCode::UNAUTHENTICATED: return Status::Unauthenticated(s.error_message());
    case grpc::StatusCode::PERMISSION_DENIED: return Status::PermissionDenied(s.error_message());
    case grpc::StatusCode::INVALID_ARGUMENT: return Status::InvalidArgument(s.error_message());
    case grpc::StatusCode::FAILED_PRECONDITION: return Status::FailedPrecondition(s.error_message());
    default: return Status::Internal(GrpcErrorString(s));
  }
}

StatusOr<std::string> BearerToken(const grpc::ServerContext& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return Status::Unauthenticated("no credentials: send `authorization: Bearer <token>`");
  const std::string value(it->second.data(), it->second.size());
  static const std::string kBearer = "Bearer ";
  if (value.compare(0, kBearer.size(), kBearer) != 0 || value.size() == kBearer.size())
    return Status::Unauthenticated("authorization metadata must be `Bearer <token>`");
  return value.substr(kBearer.size());
}

}  // namespace nightshift
