// Durable writes and reading files a user named (common/io/atomic_file.h): a write
// shows the old file or the whole new one; reads take only regular files, no further
// than their size limit, and never through a symbolic link that appeared after the path
// was checked.
#include "common/io/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace nightshift::io {
namespace {

namespace fs = std::filesystem;

std::string Fresh(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/atomic-file." + std::to_string(::getpid()) + "." + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return fs::canonical(dir).string();
}

std::string Contents(const std::string& path) {
  std::string out;
  EXPECT_EQ(ReadRegularFile(path, 1 << 20, &out), "");
  return out;
}

// Streamed pieces become the file only at Commit; a writer dropped before it (a failed
// save) leaves the old file and no temporary file behind.
TEST(AtomicFileWriterTest, PiecesBecomeTheFileAtCommitAndAnAbandonedWriteLeavesNothing) {
  const std::string dir = Fresh("writer");
  ASSERT_EQ(WriteFileAtomically(dir + "/f", "old"), "");
  {
    AtomicFileWriter w(dir + "/f");
    EXPECT_EQ(w.Append("new ", 4), "");
    EXPECT_EQ(w.Append("contents", 8), "");
    EXPECT_EQ(Contents(dir + "/f"), "old") << "not committed yet";
  }
  EXPECT_EQ(Contents(dir + "/f"), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "the temporary file is gone";
  AtomicFileWriter w(dir + "/f");
  EXPECT_EQ(w.Append("new ", 4), "");
  EXPECT_EQ(w.Append("contents", 8), "");
  EXPECT_EQ(w.Commit(), "");
  EXPECT_EQ(Contents(dir + "/f"), "new contents");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);

  AtomicFileWriter missing(dir + "/no/such/folder/f");
  const std::string err = missing.Append("x", 1);
  EXPECT_NE(err.find("cannot create " + dir + "/no/such/folder/f.tmp."), std::string::npos) << err;
  EXPECT_EQ(missing.Commit(), err) << "the first error sticks";
}

TEST(ReadRegularFileTest, ReadsAPlainFileAndRefusesLinksDevicesAndOversize) {
  const std::string dir = Fresh("regular");
  std::ofstream(dir + "/a") << "hello";
  std::string out;
  EXPECT_EQ(ReadRegularFile(dir + "/a", 5, &out), "");
  EXPECT_EQ(out, "hello");
  EXPECT_NE(ReadRegularFile(dir + "/a", 4, &out).find("more than the 4 allowed"), std::string::npos);
  fs::create_symlink(dir + "/a", dir + "/link");
  EXPECT_NE(ReadRegularFile(dir + "/link", 5, &out).find("is a symbolic link"), std::string::npos);
  EXPECT_NE(ReadRegularFile("/dev/zero", 1 << 20, &out).find("not a regular file"), std::string::npos);
  EXPECT_NE(ReadRegularFile(dir + "/none", 5, &out).find("is missing"), std::string::npos);
}

// The attack: a folder inside the root passes the worker's check (realpath under the
// root), then the user swaps a folder on the way, or the file itself, for a link to
// what lies outside. Opened beneath the root, the read is refused where a path-based
// open would follow the link; links that stay inside the root still work.
TEST(ReadFileBeneathTest, ALinkSwappedInAfterTheCheckIsNotFollowed) {
  const std::string root = Fresh("beneath") + "/root";
  const std::string outside = fs::path(root).parent_path().string() + "/outside";
  fs::create_directories(root + "/model");
  fs::create_directories(outside);
  std::ofstream(root + "/model/tokenizer.model") << "mine";
  std::ofstream(outside + "/tokenizer.model") << "secret";
  std::string out;
  ASSERT_EQ(ReadFileBeneath({root}, root + "/model/tokenizer.model", 100, &out), "");
  EXPECT_EQ(out, "mine");

  // The folder swapped for a link.
  fs::rename(root + "/model", root + "/model.old");
  fs::create_directory_symlink(outside, root + "/model");
  std::string err = ReadFileBeneath({root}, root + "/model/tokenizer.model", 100, &out);
  EXPECT_NE(err.find("leads out of the data roots"), std::string::npos) << err;
  std::ifstream followed(root + "/model/tokenizer.model");
  std::string what_a_path_open_reads;
  followed >> what_a_path_open_reads;
  EXPECT_EQ(what_a_path_open_reads, "secret");  // what the check alone would let through

  // The file swapped for a link.
  fs::remove(root + "/model");
  fs::rename(root + "/model.old", root + "/model");
  fs::remove(root + "/model/tokenizer.model");
  fs::create_symlink(outside + "/tokenizer.model", root + "/model/tokenizer.model");
  err = ReadFileBeneath({root}, root + "/model/tokenizer.model", 100, &out);
  EXPECT_NE(err.find("leads out of the data roots"), std::string::npos) << err;
  err = ReadFilePrefixBeneath({root}, root + "/model/tokenizer.model", 100, &out);
  EXPECT_NE(err.find("leads out of the data roots"), std::string::npos) << err;

  // A link inside the root (a Hugging Face cache: snapshots/<rev>/x -> ../../blobs/<sha>).
  fs::create_directories(root + "/blobs");
  std::ofstream(root + "/blobs/b1") << "blob";
  fs::remove(root + "/model/tokenizer.model");
  fs::create_symlink("../blobs/b1", root + "/model/tokenizer.model");
  ASSERT_EQ(ReadFileBeneath({root}, root + "/model/tokenizer.model", 100, &out), "");
  EXPECT_EQ(out, "blob");
  out.clear();
  ASSERT_EQ(ReadFileBeneath({}, root + "/model/tokenizer.model", 100, &out), "");  // no roots: a plain open
  EXPECT_EQ(out, "blob");
  ASSERT_EQ(ReadFilePrefixBeneath({root}, root + "/model/tokenizer.model", 2, &out), "");  // a longer file: its start
  EXPECT_EQ(out, "bl");

  // The root itself swapped for a link (a job's folder for another's, between two reads).
  fs::rename(root, root + ".old");
  fs::create_directory_symlink(root + ".old", root);
  err = ReadFileBeneath({root}, root + "/model/tokenizer.model", 100, &out);
  EXPECT_NE(err.find("is a symbolic link"), std::string::npos) << err;
  fs::remove(root);
  fs::rename(root + ".old", root);

  // Paths outside every root, or climbing out, are refused without opening anything.
  EXPECT_NE(ReadFileBeneath({root}, outside + "/tokenizer.model", 100, &out).find("not a normalized path under"),
            std::string::npos);
  EXPECT_NE(ReadFileBeneath({root}, root + "/../outside/tokenizer.model", 100, &out).find("not a normalized path"),
            std::string::npos);
  EXPECT_EQ(ReadFileBeneath({"/"}, outside + "/tokenizer.model", 100, &out), "");  // --allow-any-path
  EXPECT_EQ(out, "secret");
}

}  // namespace
}  // namespace nightshift::io
