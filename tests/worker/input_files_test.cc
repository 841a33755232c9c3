// Path confinement of job data on the worker (--data-root).
#include "worker/input_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace nightshift {
namespace {

namespace fs = std::filesystem;

class ConfineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("confine-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "root/data/ham");
    fs::create_directories(dir_ / "secret");
    std::ofstream(dir_ / "root/data/ham/1.txt") << "hello";
    std::ofstream(dir_ / "secret/passwd") << "root:x:0:0";
    roots_ = {(dir_ / "root").string()};
    ASSERT_TRUE(ResolveRoots(&roots_).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::vector<std::string> roots_;
};

TEST_F(ConfineTest, InsideARootIsAllowed) {
  std::string resolved;
  EXPECT_TRUE(ConfinePath("data.path", (dir_ / "root/data").string(), roots_, &resolved).ok());
  EXPECT_EQ(resolved, fs::canonical(dir_ / "root/data").string());
  EXPECT_TRUE(ConfinePath("data.path", (dir_ / "root").string(), roots_).ok());
  EXPECT_TRUE(ConfinePath("data.path", (dir_ / "secret").string(), {}).ok());  // no roots: anywhere
}

TEST_F(ConfineTest, DotDotSymlinksAndPrefixTricksAreRefused) {
  for (const fs::path& p : {dir_ / "secret", dir_ / "root/../secret", dir_ / "root/data/../../secret/passwd"}) {
    Status s = ConfinePath("data.path", p.string(), roots_);
    EXPECT_EQ(s.code(), Status::kInvalidArgument) << p;
    EXPECT_NE(s.message().find(roots_[0]), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("data.path '" + p.string() + "'"), std::string::npos) << s.message();
  }
  fs::create_symlink(dir_ / "secret", dir_ / "root/link");
  EXPECT_EQ(ConfinePath("data.path", (dir_ / "root/link").string(), roots_).code(), Status::kInvalidArgument);
  fs::create_directories(dir_ / "root-evil");  // shares the root's prefix
  EXPECT_EQ(ConfinePath("data.path", (dir_ / "root-evil").string(), roots_).code(), Status::kInvalidArgument);
  EXPECT_EQ(ConfinePath("data.path", (dir_ / "root/missing").string(), roots_).code(), Status::kNotFound);
}

TEST_F(ConfineTest, ListInputsRefusesFilesThatLeadOutOfTheRoots) {
  PrepOptions o;
  o.path = (dir_ / "root/data").string();
  o.roots = roots_;
  std::vector<InputFile> files;
  ASSERT_TRUE(ListInputs(o, &files).ok());
  EXPECT_EQ(files.size(), 1u);
  fs::create_symlink(dir_ / "secret/passwd", dir_ / "root/data/ham/2.txt");
  Status s = ListInputs(o, &files);
  EXPECT_EQ(s.code(), Status::kInvalidArgument);
  EXPECT_NE(s.message().find("secret"), std::string::npos) << s.message();
  fs::remove(dir_ / "root/data/ham/2.txt");
  fs::create_directory_symlink(dir_ / "secret", dir_ / "root/data/spam");  // a label folder
  EXPECT_EQ(ListInputs(o, &files).code(), Status::kInvalidArgument);
  o.roots.clear();  // no confinement: the same layout is fine
  EXPECT_TRUE(ListInputs(o, &files).ok());
}

TEST(ResolveRootsTest, MissingRootIsAnError) {
  std::vector<std::string> roots = {"/nonexistent/nightshift-root"};
  EXPECT_FALSE(ResolveRoots(&roots).ok());
}

}  // namespace
}  // namespace nightshift
