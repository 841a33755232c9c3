#include "common/status.h"

namespace nightshift {

std::string Status::ToString() const {
  const char* name = "UNKNOWN";
  switch (code_) {
    case kOk: return "OK";
    case kCancelled: name = "CANCELLED"; break;
    case kInvalidArgument: name = "INVALID_ARGUMENT"; break;
    case kDeadlineExceeded: name = "DEADLINE_EXCEEDED"; break;
    case kNotFound: name = "NOT_FOUND"; break;
    case kPermissionDenied: name = "PERMISSION_DENIED"; break;
    case kResourceExhausted: name = "RESOURCE_EXHAUSTED"; break;
    case kFailedPrecondition: name = "FAILED_PRECONDITION"; break;
    case kInternal: name = "INTERNAL"; break;
    case kUnavailable: name = "UNAVAILABLE"; break;
    case kDataLoss: name = "DATA_LOSS"; break;
    case kUnauthenticated: name = "UNAUTHENTICATED"; break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace nightshift
