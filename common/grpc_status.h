// Conversion between our Status and grpc::Status (the codes are the same numbers).
#ifndef NIGHTSHIFT_COMMON_GRPC_STATUS_H_
#define NIGHTSHIFT_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace nightshift {

inline grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

// For clients: "CODE: message".
std::string GrpcErrorString(const grpc::Status& s);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_GRPC_STATUS_H_
