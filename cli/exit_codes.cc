#include "cli/exit_codes.h"

#include <iostream>

#include "common/grpc_status.h"

namespace nightshift::cli {

const char kExitCodesHelp[] =
    "Exit codes: 0 success; 1 the job ended FAILED or CANCELLED (submit --wait, watch);\n"
    "2 bad usage; 3 the coordinator refused the call (the message says why);\n"
    "4 the coordinator cannot be reached; 5 a download did not match its checksums (nothing kept).";

int ExitCodeOf(const grpc::Status& call) {
  switch (call.error_code()) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnreachable;
    default:
      return kExitRefused;
  }
}

int ExitCodeOf(const Status& local) {
  if (local.ok()) return kExitOk;
  return local.code() == Status::kDataLoss ? kExitCorrupt : kExitUsage;
}

int ExitCodeOf(v1::JobState last_seen) { return last_seen == v1::SUCCEEDED ? kExitOk : kExitJobFailed; }

int ExitCodeOf(const CLI::ParseError& parse) {
  return parse.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success) ? kExitOk : kExitUsage;
}

int CallFailed(const grpc::Status& call, const std::string& context) {
  std::cerr << "error: " << (context.empty() ? "" : context + ": ") << GrpcErrorString(call) << "\n";
  return ExitCodeOf(call);
}

int LocalError(const Status& local) {
  std::cerr << "error: " << local.message() << "\n";
  return ExitCodeOf(local);
}

}  // namespace nightshift::cli
