#include "cli/exit_codes.h"

#include <gtest/gtest.h>

#include <string>

namespace nightshift::cli {
namespace {

using grpc::StatusCode;

TEST(ExitCodesTest, EveryGrpcCodeHasItsExitCode) {
  // UNAVAILABLE and DEADLINE_EXCEEDED: nobody answered (in time); every other error is
  // the coordinator's answer.
  const std::pair<StatusCode, int> expected[] = {
      {StatusCode::OK, 0},
      {StatusCode::CANCELLED, 3},
      {StatusCode::UNKNOWN, 3},
      {StatusCode::INVALID_ARGUMENT, 3},
      {StatusCode::DEADLINE_EXCEEDED, 4},
      {StatusCode::NOT_FOUND, 3},
      {StatusCode::ALREADY_EXISTS, 3},
      {StatusCode::PERMISSION_DENIED, 3},
      {StatusCode::RESOURCE_EXHAUSTED, 3},
      {StatusCode::FAILED_PRECONDITION, 3},
      {StatusCode::ABORTED, 3},
      {StatusCode::OUT_OF_RANGE, 3},
      {StatusCode::UNIMPLEMENTED, 3},
      {StatusCode::INTERNAL, 3},
      {StatusCode::UNAVAILABLE, 4},
      {StatusCode::DATA_LOSS, 3},
      {StatusCode::UNAUTHENTICATED, 3},
  };
  ASSERT_EQ(std::size(expected), 17u);  // every code gRPC defines, 0..16
  for (const auto& [code, exit_code] : expected)
    EXPECT_EQ(ExitCodeOf(grpc::Status(code, "m")), exit_code) << "grpc code " << code;
}

TEST(ExitCodesTest, LocalErrorsAreUsageErrorsWhateverTheirCode) {
  EXPECT_EQ(ExitCodeOf(Status::OK()), kExitOk);
  EXPECT_EQ(ExitCodeOf(Status::InvalidArgument("config file x: unknown key")), kExitUsage);
  EXPECT_EQ(ExitCodeOf(Status::NotFound("cannot read --token-file t")), kExitUsage);
  EXPECT_EQ(ExitCodeOf(Status::Unavailable("not a call")), kExitUsage);
}

TEST(ExitCodesTest, AFollowedJobSucceedsOnlyInSucceeded) {
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (!v1::JobState_IsValid(s)) continue;
    const auto state = static_cast<v1::JobState>(s);
    EXPECT_EQ(ExitCodeOf(state), state == v1::SUCCEEDED ? kExitOk : kExitJobFailed) << v1::JobState_Name(state);
  }
}

TEST(ExitCodesTest, CommandLinesCli11RefusesAreUsageErrorsExceptHelp) {
  EXPECT_EQ(ExitCodeOf(CLI::RequiredError("ID")), kExitUsage);         // CLI11: 106
  EXPECT_EQ(ExitCodeOf(CLI::ExtrasError({"frob"})), kExitUsage);       // 109
  EXPECT_EQ(ExitCodeOf(CLI::ValidationError("--output", "xml")), kExitUsage);  // 105
  EXPECT_EQ(ExitCodeOf(CLI::CallForHelp()), kExitOk);
  EXPECT_EQ(ExitCodeOf(CLI::CallForAllHelp()), kExitOk);
}

TEST(ExitCodesTest, TheNumbersAreTheDocumentedOnes) {
  EXPECT_EQ(kExitOk, 0);
  EXPECT_EQ(kExitJobFailed, 1);
  EXPECT_EQ(kExitUsage, 2);
  EXPECT_EQ(kExitRefused, 3);
  EXPECT_EQ(kExitUnreachable, 4);
  const std::string help = kExitCodesHelp;
  for (const char* part : {"0 success", "1 the job ended FAILED or CANCELLED", "2 bad usage",
                           "3 the coordinator refused the call", "4 the coordinator cannot be reached"})
    EXPECT_NE(help.find(part), std::string::npos) << part;
}

TEST(ExitCodesTest, FailuresArePrintedWithTheirCodeAndContext) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(CallFailed(grpc::Status(StatusCode::INVALID_ARGUMENT, "model.arch (line 2): unknown"), "job.yaml"), 3);
  EXPECT_EQ(CallFailed(grpc::Status(StatusCode::UNAVAILABLE, "connection refused")), 4);
  EXPECT_EQ(LocalError(Status::InvalidArgument("spec file x is empty")), 2);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "error: job.yaml: INVALID_ARGUMENT: model.arch (line 2): unknown\n"
            "error: UNAVAILABLE: connection refused\n"
            "error: spec file x is empty\n");
}

}  // namespace
}  // namespace nightshift::cli
