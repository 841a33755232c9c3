// A job's folder beneath the checkpoint root (worker/confinement.h's MakeJobFolder, and
// ChildSetup::Prepare, which makes a job's writable folders): a shared root is writable by
// every owner and job ids are predictable, so the folder a job resumes from and writes into
// must be one no other user made, reaches through a link, or can write to.
#include "worker/confinement.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/worker/test_dirs.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

// The permission bits of `path` itself (a link is not followed); -1 when it is not there.
int ModeOf(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

class ConfinementTest : public testing::Test {
 protected:
  void SetUp() override {
    UnconfineChildren();  // no job user: only this process's own uid owns a job's folder
    dir_ = testdirs::FreshTestDir("confinement");
    root_ = dir_ + "/checkpoints";
    job_ = root_ + "/j-000043";
  }
  void TearDown() override {
    UnconfineChildren();
    fs::remove_all(dir_);
  }
  std::string dir_, root_, job_;
};

TEST_F(ConfinementTest, AJobFolderIsMadeOwnerOnlyWhateverTheUmask) {
  const mode_t umask_was = ::umask(0);
  const Status made = MakeJobFolder(job_);  // the root too, which is missing
  ::umask(umask_was);
  ASSERT_TRUE(made.ok()) << made.ToString();
  struct stat st;
  ASSERT_EQ(::lstat(job_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_TRUE(MakeJobFolder(job_).ok());  // the next attempt takes it as it is
  EXPECT_EQ(ModeOf(job_), 0700);
}

// Under a setgid root whose group this worker is not in (the operator's, for the
// coordinator's user, which serves `job artifacts` from the shared root) the folder takes
// that group, which may read it: 0750. Under a setgid
// root of a group of the worker's (one the owners may share), the owner alone: 0700.
TEST_F(ConfinementTest, UnderASetgidRootOfAnotherGroupThatGroupMayReadAJobFolder) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to give the root a group this process is not in)";
  fs::create_directories(root_);
  ASSERT_EQ(::chown(root_.c_str(), static_cast<uid_t>(-1), 65534), 0);
  ASSERT_EQ(::chmod(root_.c_str(), 03777), 0);
  const Status made = MakeJobFolder(job_);
  ASSERT_TRUE(made.ok()) << made.ToString();
  struct stat st;
  ASSERT_EQ(::lstat(job_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
  EXPECT_EQ(st.st_gid, 65534u);
  ASSERT_EQ(::chmod(job_.c_str(), 02755), 0);  // an older worker's: tightened to 0750
  EXPECT_TRUE(MakeJobFolder(job_).ok());
  EXPECT_EQ(ModeOf(job_) & 0777, 0750);
  fs::remove_all(job_);
  ASSERT_EQ(::chown(root_.c_str(), static_cast<uid_t>(-1), ::getegid()), 0);
  ASSERT_EQ(::chmod(root_.c_str(), 03777), 0);
  ASSERT_TRUE(MakeJobFolder(job_).ok());
  EXPECT_EQ(ModeOf(job_) & 0777, 0700);
}

// A folder an older worker made under the umask (0755: every user could read the job's
// checkpoints) is the worker's own: taken, and made 0700, its files kept.
TEST_F(ConfinementTest, AnOwnJobFolderReadableByOthersIsMadeOwnerOnly) {
  fs::create_directories(job_ + "/step-00000010");
  ASSERT_EQ(::chmod(job_.c_str(), 0755), 0);
  const Status taken = MakeJobFolder(job_);
  ASSERT_TRUE(taken.ok()) << taken.ToString();
  EXPECT_EQ(ModeOf(job_), 0700);
  EXPECT_TRUE(fs::is_directory(job_ + "/step-00000010"));
}

// Group or others' write lets them put a checkpoint in it, or rename one in: refused as
// found, whoever owns it (here this worker's user itself), whatever the group (a group
// the worker is in may hold other owners too).
TEST_F(ConfinementTest, AJobFolderOthersCanWriteToIsRefused) {
  for (const int mode : {0777, 0770, 02770, 0702, 01777}) {
    fs::create_directories(job_);
    ASSERT_EQ(::chmod(job_.c_str(), static_cast<mode_t>(mode)), 0);
    const Status refused = MakeJobFolder(job_);
    EXPECT_EQ(refused.code(), Status::kPermissionDenied) << mode << ": " << refused.ToString();
    EXPECT_NE(refused.message().find(job_ + " (owner uid " + std::to_string(::geteuid()) + ", mode "),
              std::string::npos)
        << refused.message();
    EXPECT_NE(refused.message().find("writable by other users"), std::string::npos) << refused.message();
    EXPECT_EQ(ModeOf(job_), mode);  // left as it was
    fs::remove_all(job_);
  }
}

// <root>/<job id> made a link (to a folder of the worker's user, or to nothing yet) by
// another user is not followed: the job would write where the link's maker reads.
TEST_F(ConfinementTest, AJobFolderThatIsALinkIsRefused) {
  const std::string target = dir_ + "/elsewhere";
  fs::create_directories(root_);
  fs::create_directories(target);
  ASSERT_EQ(::chmod(target.c_str(), 0755), 0);
  fs::create_symlink(target, job_);
  Status refused = MakeJobFolder(job_);
  EXPECT_EQ(refused.code(), Status::kPermissionDenied) << refused.ToString();
  EXPECT_NE(refused.message().find(job_ + " (owner uid"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("symbolic link"), std::string::npos) << refused.message();
  EXPECT_EQ(ModeOf(target), 0755);  // not made private: not taken
  EXPECT_TRUE(fs::is_symlink(job_));

  fs::remove(job_);
  fs::remove(target);
  fs::create_symlink(target, job_);  // dangling: mkdir would make its target
  refused = MakeJobFolder(job_);
  EXPECT_EQ(refused.code(), Status::kPermissionDenied) << refused.ToString();
  EXPECT_FALSE(fs::exists(target));
}

TEST_F(ConfinementTest, AJobFolderThatIsAFileIsRefused) {
  fs::create_directories(root_);
  std::ofstream(job_) << "not a folder\n";
  const Status refused = MakeJobFolder(job_);
  EXPECT_EQ(refused.code(), Status::kPermissionDenied) << refused.ToString();
  EXPECT_NE(refused.message().find("is not a folder"), std::string::npos) << refused.message();
}

// Another owner's `mkdir -m 0700 <root>/<job id>` (tests run as root: chown plays them).
TEST_F(ConfinementTest, AJobFolderOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to give the folder to another user)";
  fs::create_directories(job_);
  ASSERT_EQ(::chmod(job_.c_str(), 0700), 0);
  ASSERT_EQ(::chown(job_.c_str(), 65534, 65534), 0);
  const Status refused = MakeJobFolder(job_);
  EXPECT_EQ(refused.code(), Status::kPermissionDenied) << refused.ToString();
  EXPECT_NE(refused.message().find(job_ + " (owner uid 65534, mode 0700)"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("belongs to another user"), std::string::npos) << refused.message();
}

// A root worker gives the job's folder to the user it runs jobs as (its ranks write
// there): the next attempt takes that folder as the job's own, and refuses any other
// user's rather than giving it to the job's user.
TEST_F(ConfinementTest, UnderARootWorkerTheJobsUserOwnsItsFolderAndNoOtherUserDoes) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  const passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  const uid_t job_user = nobody->pw_uid;
  const Status confined = ConfineChildren({{}, {}, "nobody"});
  if (!confined.ok()) GTEST_SKIP() << "no mount namespaces here: " << confined.ToString();
  fs::create_directories(root_);
  ASSERT_EQ(::chown(root_.c_str(), static_cast<uid_t>(-1), 65534), 0);
  ASSERT_EQ(::chmod(root_.c_str(), 03777), 0);  // setgid, of a group root is not in
  fs::create_directories(job_);
  ASSERT_EQ(::chmod(job_.c_str(), 0700), 0);
  ASSERT_EQ(::chown(job_.c_str(), job_user, job_user), 0);
  EXPECT_TRUE(MakeJobFolder(job_).ok());
  JobView view{{}, {job_}, dir_ + "/view"};
  EXPECT_TRUE(ChildSetup::Prepare(&view).ok());
  // Given to the job's user, its group becomes that user's: the owner alone reads it.
  EXPECT_EQ(ModeOf(job_) & 0777, 0700);

  const uid_t another = job_user == 4242 ? 4243 : 4242;
  ASSERT_EQ(::chown(job_.c_str(), another, another), 0);
  EXPECT_EQ(MakeJobFolder(job_).code(), Status::kPermissionDenied);
  const StatusOr<ChildSetup> setup = ChildSetup::Prepare(&view);
  ASSERT_FALSE(setup.ok());
  EXPECT_EQ(setup.status().code(), Status::kPermissionDenied) << setup.status().ToString();
  struct stat st;
  ASSERT_EQ(::lstat(job_.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, another);  // not given to the job's user
}

// A root worker that runs jobs as root (no other user to give the folder to) makes or
// checks the job's writable folder as it prepares the job's process too.
TEST_F(ConfinementTest, PreparingAJobRefusesAWritableFolderOthersCanWriteTo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  const Status confined = ConfineChildren({{}, {}, "root"});
  if (!confined.ok()) GTEST_SKIP() << "no mount namespaces here: " << confined.ToString();
  JobView view{{}, {job_}, dir_ + "/view"};
  ASSERT_TRUE(ChildSetup::Prepare(&view).ok());
  EXPECT_EQ(ModeOf(job_), 0700);  // made by Prepare
  ASSERT_EQ(::chmod(job_.c_str(), 0777), 0);
  const StatusOr<ChildSetup> setup = ChildSetup::Prepare(&view);
  ASSERT_FALSE(setup.ok());
  EXPECT_EQ(setup.status().code(), Status::kPermissionDenied) << setup.status().ToString();
}

}  // namespace
}  // namespace nightshift
