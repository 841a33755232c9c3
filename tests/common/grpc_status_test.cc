#include "common/grpc_status.h"

#include <gtest/gtest.h>

namespace nightshift {
namespace {

TEST(GrpcStatusTest, CodesCallersActOnSurviveTheRoundTrip) {
  const Status statuses[] = {Status::NotFound("no job j-1"), Status::Unavailable("down"),
                             Status::DeadlineExceeded("slow"), Status::Unauthenticated("who"),
                             Status::PermissionDenied("not yours"), Status::InvalidArgument("model.arch"),
                             Status::FailedPrecondition("job is QUEUED")};
  for (const Status& s : statuses) {
    const Status back = FromGrpc(ToGrpc(s));
    EXPECT_EQ(back.code(), s.code()) << s.ToString();
    EXPECT_EQ(back.message(), s.message());
  }
  EXPECT_TRUE(FromGrpc(ToGrpc(Status::OK())).ok());
}

TEST(GrpcStatusTest, OtherCodesBecomeInternalNamingTheCode) {
  const Status s = FromGrpc(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many jobs"));
  EXPECT_EQ(s.code(), Status::kInternal);
  EXPECT_EQ(s.message(), "RESOURCE_EXHAUSTED: too many jobs");
}

}  // namespace
}  // namespace nightshift
