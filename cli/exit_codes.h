// The CLI's exit codes, decided here and nowhere else (`nightshift --help` prints
// kExitCodesHelp; scripts and tests depend on these numbers).
#ifndef NIGHTSHIFT_CLI_EXIT_CODES_H_
#define NIGHTSHIFT_CLI_EXIT_CODES_H_

#include <grpcpp/support/status.h>

#include <CLI/CLI.hpp>
#include <string>

#include "common/status.h"
#include "nightshift/v1/jobs.pb.h"

namespace nightshift::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitJobFailed = 1,    // a job followed to its end (submit --wait, watch) did not SUCCEED
  kExitUsage = 2,        // the command line, the settings file, a credential or the spec file is wrong
  kExitRefused = 3,      // the coordinator answered with an error (the message says why)
  kExitUnreachable = 4,  // the coordinator could not be reached or did not answer in time
  kExitCorrupt = 5,      // what was downloaded does not match its checksums (nothing was kept)
};

extern const char kExitCodesHelp[];

// A call's outcome: UNAVAILABLE and DEADLINE_EXCEEDED are kExitUnreachable, every other
// error code is the coordinator's answer (kExitRefused).
int ExitCodeOf(const grpc::Status& call);

// An error found before any call (settings, credentials, the spec file): kExitUsage;
// corruption (Status::Corruption: a download that does not verify): kExitCorrupt.
int ExitCodeOf(const Status& local);

// The state a followed job was last seen in: kExitOk only for SUCCEEDED.
int ExitCodeOf(v1::JobState last_seen);

// CLI11's verdict on a command line it refused: kExitOk when it was a request for
// help, kExitUsage for every usage error (CLI11's own codes, 100 and up, are not ours).
int ExitCodeOf(const CLI::ParseError& parse);

// Prints "error: [context: ]CODE: message" to stderr; returns ExitCodeOf(call).
int CallFailed(const grpc::Status& call, const std::string& context = "");

// Prints "error: message" to stderr; returns ExitCodeOf(local).
int LocalError(const Status& local);

}  // namespace nightshift::cli

#endif  // NIGHTSHIFT_CLI_EXIT_CODES_H_
