// Directories and tiny corpora for the worker's tests.
#ifndef NIGHTSHIFT_TESTS_WORKER_TEST_DIRS_H_
#define NIGHTSHIFT_TESTS_WORKER_TEST_DIRS_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace nightshift::testdirs {

// An empty directory of this test alone: TempDir()/PREFIX.PID.TESTNAME (emptied first).
inline std::string FreshTestDir(const std::string& prefix) {
  const std::string dir = ::testing::TempDir() + "/" + prefix + "." + std::to_string(::getpid()) + "." +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A text_dir corpus in DIR: DIR/ham/0, DIR/ham/1, ... and DIR/spam/..., `per_label` files
// each, whose text is the label and the index ("ham0").
inline void WriteTinyCorpus(const std::string& dir, int per_label) {
  for (const char* label : {"ham", "spam"}) {
    std::filesystem::create_directories(dir + "/" + label);
    for (int i = 0; i < per_label; ++i) std::ofstream(dir + "/" + label + "/" + std::to_string(i)) << label << i;
  }
}

}  // namespace nightshift::testdirs

#endif  // NIGHTSHIFT_TESTS_WORKER_TEST_DIRS_H_
