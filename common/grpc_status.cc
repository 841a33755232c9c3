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

}  // namespace nightshift
