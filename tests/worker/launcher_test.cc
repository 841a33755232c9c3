// What a job's processes inherit from the worker (worker/launcher.h): a job runs the
// user's code, so it must not find the worker's token in its environment, nor read the
// worker's token file.
#include "worker/launcher.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/worker/test_dirs.h"

namespace nightshift {
namespace {

// Runs argv through SpawnProcess; its output (stdout and stderr) and exit status.
std::pair<std::string, int> RunChild(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                                const std::string& log) {
  auto child = SpawnProcess(argv, env, log);
  EXPECT_TRUE(child.ok()) << child.status().ToString();
  if (!child.ok()) return {"", -1};
  int status = 0;
  ::waitpid(child->pid, &status, 0);
  ::close(child->progress_fd);
  std::ifstream in(log);
  std::stringstream out;
  out << in.rdbuf();
  return {out.str(), status};
}

TEST(LauncherTest, AJobSeesNoSecretOfTheWorkersEnvironment) {
  const std::string dir = testdirs::FreshTestDir("launcher_env");
  ::setenv("NIGHTSHIFT_TOKEN", "worker-secret", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "cloud-secret", 1);
  ::setenv("CUDA_TEST_SETTING", "kept", 1);
  ::setenv("NIGHTSHIFT_FAULT_TEST", "kept", 1);
  const auto [out, status] = RunChild({"/usr/bin/env"}, {{"RANK", "3"}}, dir + "/env.log");
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out.find("worker-secret"), std::string::npos) << out;
  EXPECT_EQ(out.find("cloud-secret"), std::string::npos) << out;
  EXPECT_NE(out.find("CUDA_TEST_SETTING=kept"), std::string::npos) << out;
  EXPECT_NE(out.find("NIGHTSHIFT_FAULT_TEST=kept"), std::string::npos) << out;
  EXPECT_NE(out.find("RANK=3"), std::string::npos) << out;
  EXPECT_NE(out.find("NIGHTSHIFT_PROGRESS_FD=3"), std::string::npos) << out;
  EXPECT_NE(out.find("PATH="), std::string::npos) << out;
  ::unsetenv("NIGHTSHIFT_TOKEN");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
}

// As root, the worker's token file is covered in each job's own mount namespace; the
// worker itself still reads it.
TEST(LauncherTest, AJobCannotReadTheWorkersTokenFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a private mount namespace per job)";
  const std::string dir = testdirs::FreshTestDir("launcher_token");
  const std::string token_file = dir + "/worker-token";
  std::ofstream(token_file) << "worker-secret\n";
  ASSERT_TRUE(HideFromChildren(token_file));
  const auto [out, status] = RunChild({"/bin/cat", token_file}, {}, dir + "/cat.log");
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("worker-secret"), std::string::npos) << out;
  std::ifstream still(token_file);
  std::string token;
  still >> token;
  EXPECT_EQ(token, "worker-secret");  // our own view is unchanged
}

}  // namespace
}  // namespace nightshift
