// What a job's processes inherit from the worker (worker/launcher.h, worker/confinement.h):
// a job runs the user's code, so it must not find the worker's token in its environment,
// nor read the worker's token file, nor reach the worker's other folders or privileges.
#include "worker/launcher.h"

#include <gtest/gtest.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/worker/test_dirs.h"

namespace nightshift {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

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

// A process of the worker's own (data preparation) finds /dev/null in place of the
// worker's token file; the worker itself still reads it.
TEST(LauncherTest, AChildCannotReadTheWorkersTokenFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a private mount namespace per child)";
  const std::string dir = testdirs::FreshTestDir("launcher_token");
  const std::string token_file = dir + "/worker-token";
  std::ofstream(token_file) << "worker-secret\n";
  ASSERT_TRUE(ConfineChildren({{token_file}, {}, ""}).ok());
  const auto [out, status] = RunChild({"/bin/cat", token_file}, {}, dir + "/cat.log");
  UnconfineChildren();
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("worker-secret"), std::string::npos) << out;
  std::ifstream still(token_file);
  std::string token;
  still >> token;
  EXPECT_EQ(token, "worker-secret");  // our own view is unchanged
}

// The worker's folders as a test makes them: a work dir with this job's attempt folder and
// another job's, a checkpoint root with both jobs' checkpoints, a token file; world-readable,
// so that only the confinement keeps the job from them.
struct WorkerFolders {
  explicit WorkerFolders(const std::string& dir)
      : work(dir + "/work"), checkpoints(dir + "/checkpoints"), token(dir + "/worker-token") {
    for (const std::string& d :
         {work + "/jobs/mine", work + "/jobs/theirs", checkpoints + "/mine", checkpoints + "/theirs"})
      std::filesystem::create_directories(d);
    std::ofstream(work + "/jobs/mine/config") << "own-config\n";
    std::ofstream(work + "/jobs/theirs/config") << "their-config\n";
    std::ofstream(checkpoints + "/mine/step-1") << "own-checkpoint\n";
    std::ofstream(checkpoints + "/theirs/step-1") << "their-checkpoint\n";
    std::ofstream(token) << "worker-secret\n";
  }
  ConfinementOptions Options(const std::string& run_as = "") const { return {{token}, {work, checkpoints}, run_as}; }
  JobView View() const { return {{work + "/jobs/mine"}, {checkpoints + "/mine"}, work + "/jobs/mine/.view"}; }
  // A shell script, run as the job, that tries every way at what is not its own.
  std::string Attack() const {
    return "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; "
           "cat " + token + " /proc/$PPID/root" + token + " /proc/$PPID/environ " + work + "/jobs/theirs/config " +
           checkpoints + "/theirs/step-1 /proc/$PPID/root" + checkpoints + "/theirs/step-1; umount " + token +
           "; umount " + work + "; cat " + token + " " + work + "/jobs/theirs/config; cat " + work +
           "/jobs/mine/config " +
           checkpoints + "/mine/step-1; echo written > " + checkpoints + "/mine/step-2 && echo wrote-own; "
           "echo x > " + work + "/jobs/mine/x || echo own-config-read-only; exit 0";
  }
  std::string work, checkpoints, token;
};

// Under a root worker a job runs as the job's user, without capabilities, and sees none of
// the worker's folders but its own: its attempt's folder read-only, its checkpoints
// writable (given to its user, links left alone), also when they lie in a folder that
// user may not pass through.
TEST(LauncherTest, UnderARootWorkerAJobRunsAsItsUserAndSeesOnlyItsOwnFolders) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  const std::string dir = testdirs::FreshTestDir("launcher_job_root");
  const WorkerFolders f(dir + "/private");  // in a folder the job's user may not pass through
  std::filesystem::permissions(dir + "/private", std::filesystem::perms::owner_all);
  std::filesystem::create_symlink(f.token, f.checkpoints + "/mine/link-to-token");
  ASSERT_TRUE(ConfineChildren(f.Options("nobody")).ok());
  const JobView view = f.View();
  ::setenv("NIGHTSHIFT_TOKEN", "worker-secret-in-env", 1);
  auto child = SpawnProcess({"/bin/sh", "-c", f.Attack()}, {}, dir + "/job.log", {}, &view);
  UnconfineChildren();
  ::unsetenv("NIGHTSHIFT_TOKEN");
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  int status = 0;
  ::waitpid(child->pid, &status, 0);
  ::close(child->progress_fd);
  const std::string out = ReadAll(dir + "/job.log");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("65534\n"), std::string::npos) << out;
  EXPECT_NE(out.find("CapEff:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("CapBnd:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
  for (const char* secret : {"worker-secret", "their-config", "their-checkpoint"})
    EXPECT_EQ(out.find(secret), std::string::npos) << secret << " in:\n" << out;
  EXPECT_NE(out.find("own-config"), std::string::npos) << out;
  EXPECT_NE(out.find("own-checkpoint"), std::string::npos) << out;
  EXPECT_NE(out.find("wrote-own"), std::string::npos) << out;
  EXPECT_NE(out.find("own-config-read-only"), std::string::npos) << out;
  struct stat st;
  ASSERT_EQ(::stat((f.checkpoints + "/mine/step-1").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);  // given to the job's user
  ASSERT_EQ(::stat(f.token.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);  // the link in its folder was not followed
}

// A worker that is not root runs a job as itself, in a user namespace of its own uid: the
// job cannot undo the mounts that hide the token file and the other jobs' folders.
TEST(LauncherTest, UnderAWorkerThatIsNotRootAJobSeesOnlyItsOwnFolders) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to become another user)";
  const std::string dir = testdirs::FreshTestDir("launcher_job_user");
  const WorkerFolders f(dir);
  ASSERT_EQ(std::system(("chown -R 65534:65534 " + dir).c_str()), 0);
  const pid_t worker = ::fork();  // plays the worker, as nobody
  if (worker == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)
      ::_exit(10);
    ::prctl(PR_SET_DUMPABLE, 0);
    const Status confined = ConfineChildren(f.Options());
    if (!confined.ok()) {
      std::ofstream(dir + "/job.log") << confined.ToString();
      ::_exit(confined.code() == Status::kUnavailable ? 11 : 12);
    }
    const JobView view = f.View();
    auto child = SpawnProcess({"/bin/sh", "-c", f.Attack()}, {}, dir + "/job.log", {}, &view);
    int status = 1;
    if (child.ok()) ::waitpid(child->pid, &status, 0);
    ::_exit(child.ok() && status == 0 ? 0 : 13);
  }
  int status = 0;
  ::waitpid(worker, &status, 0);
  const std::string out = ReadAll(dir + "/job.log");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 11) GTEST_SKIP() << "no unprivileged user namespaces here: " << out;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << out;
  EXPECT_NE(out.find("65534\n"), std::string::npos) << out;
  EXPECT_NE(out.find("CapEff:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
  for (const char* secret : {"worker-secret", "their-config", "their-checkpoint"})
    EXPECT_EQ(out.find(secret), std::string::npos) << secret << " in:\n" << out;
  EXPECT_NE(out.find("own-config"), std::string::npos) << out;
  EXPECT_NE(out.find("wrote-own"), std::string::npos) << out;
  EXPECT_NE(out.find("own-config-read-only"), std::string::npos) << out;
}

// --run-as names a user that exists; a worker that is not root cannot run jobs as another.
TEST(LauncherTest, RunAsMustNameAUserTheWorkerCanBecome) {
  EXPECT_EQ(ConfineChildren({{}, {}, "no-such-user-of-nightshift"}).code(), Status::kInvalidArgument);
  UnconfineChildren();
}

}  // namespace
}  // namespace nightshift
