// Conversion between our Status and grpc::Status (the codes are the same numbers), and
// the bearer token a call carries.
#ifndef NIGHTSHIFT_COMMON_GRPC_STATUS_H_
#define NIGHTSHIFT_COMMON_GRPC_STATUS_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <string>

#include "common/status.h"

namespace nightshift {

inline grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

// For clients: the codes callers act on keep their meaning (NOT_FOUND, UNAVAILABLE,
// DEADLINE_EXCEEDED, UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT,
// FAILED_PRECONDITION); any other becomes Internal with "CODE: message".
Status FromGrpc(const grpc::Status& s);

// For clients: "CODE: message".
std::string GrpcErrorString(const grpc::Status& s);

// For servers: the token of the call's `authorization: Bearer <token>` metadata, or
// UNAUTHENTICATED saying it is missing or not of that form.
StatusOr<std::string> BearerToken(const grpc::ServerContext& ctx);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_GRPC_STATUS_H_
