#include "common/command.h"

#include <gtest/gtest.h>

#include <chrono>

namespace nightshift {
namespace {

TEST(CommandTest, ReadsBothOutputsAndTheExitCodeAndFeedsStdin) {
  SubprocessRunner runner;
  // 3 MiB in and out: more than a pipe holds, so feeding and draining must interleave.
  const std::string input(3 << 20, 'x');
  StatusOr<CommandResult> r =
      runner.Run({"sh", "-c", "cat; echo \"to err $GREETING\" >&2; exit 3"}, input, {{"GREETING", "hello"}}, 30);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, input);
  EXPECT_EQ(r->err, "to err hello\n");
}

TEST(CommandTest, AProgramThatIsNotThereIsNotFoundAndOnePastItsTimeIsKilled) {
  SubprocessRunner runner;
  StatusOr<CommandResult> missing = runner.Run({"nightshift-no-such-program"}, "", {}, 10);
  EXPECT_EQ(missing.status().code(), Status::kNotFound) << missing.status().ToString();
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<CommandResult> slow = runner.Run({"sleep", "30"}, "", {}, 0.5);
  EXPECT_EQ(slow.status().code(), Status::kDeadlineExceeded) << slow.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  StatusOr<CommandResult> killed = runner.Run({"sh", "-c", "kill -9 $$"}, "", {}, 10);
  ASSERT_TRUE(killed.ok());
  EXPECT_EQ(killed->exit_code, 128 + 9);
}

// squeue --json of a busy cluster past 16 MiB: an error saying so, never the cut text
// (which the caller would fail to parse, or worse, read as fewer jobs). Exactly 16 MiB
// passes; more on stderr is cut without an error.
TEST(CommandTest, AnOutputPastItsLimitIsAnErrorNotACutResult) {
  SubprocessRunner runner;
  StatusOr<CommandResult> big = runner.Run({"head", "-c", "16777217", "/dev/zero"}, "", {}, 30);
  EXPECT_EQ(big.status().code(), Status::kResourceExhausted) << big.status().ToString();
  EXPECT_NE(big.status().message().find("more than 16 MiB"), std::string::npos) << big.status().ToString();
  StatusOr<CommandResult> exact = runner.Run({"head", "-c", "16777216", "/dev/zero"}, "", {}, 30);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  EXPECT_EQ(exact->out.size(), size_t{16} << 20);
  StatusOr<CommandResult> noisy = runner.Run({"sh", "-c", "head -c 16777300 /dev/zero >&2"}, "", {}, 30);
  ASSERT_TRUE(noisy.ok()) << noisy.status().ToString();
  EXPECT_EQ(noisy->err.size(), size_t{16} << 20);
}

}  // namespace
}  // namespace nightshift
