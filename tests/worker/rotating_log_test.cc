#include "worker/rotating_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace nightshift {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RotatingLogTest, RotatesPastTheLimitAndKeepsTheNewest) {
  const std::string dir = testing::TempDir() + "/rotlog." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/rank-0.log";
  {
    RotatingLog log(path, /*max_bytes=*/100, /*keep=*/2);
    for (int i = 0; i < 10; ++i) {
      std::string line = "line " + std::to_string(i) + " " + std::string(30, 'x') + "\n";  // 38-39 bytes
      log.Write(line.data(), line.size());
    }
  }
  // Two lines fit in 100 bytes: 9 and 8 are current, 7 and 6 in .1, 5 and 4 in .2; older are gone.
  EXPECT_NE(Read(path).find("line 9"), std::string::npos);
  EXPECT_NE(Read(path).find("line 8"), std::string::npos);
  EXPECT_NE(Read(path + ".1").find("line 7"), std::string::npos);
  EXPECT_NE(Read(path + ".2").find("line 4"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path + ".3"));
  EXPECT_LE(std::filesystem::file_size(path), 100u);
  // Reopening appends.
  {
    RotatingLog log(path, 1000, 2);
    log.Write("more\n", 5);
  }
  EXPECT_NE(Read(path).find("line 9"), std::string::npos);
  EXPECT_NE(Read(path).find("more"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nightshift
