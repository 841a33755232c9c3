// checksums.json on the daemons' side: written as SHA-256, and folders written before it
// (SHA-1) still verify; a changed file is named with its algorithm.
#include "common/model_folder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/common/test_model_folder.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("nightshift_model_folder_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TEST(ModelFolderTest, WritesSha256AndVerifiesIt) {
  const std::string dir = FreshDir("sha256");
  ASSERT_FALSE(testing_model::WriteModelFolder(dir).empty());
  auto sums = ParseChecksums(testing_model::ReadFile(dir + "/" + kChecksumsFile));
  ASSERT_TRUE(sums.ok()) << sums.status().message();
  EXPECT_EQ(sums->at("config.json").algorithm, "sha256");
  EXPECT_EQ(sums->at("config.json").hex, crypto::Sha256Hex(testing_model::ReadFile(dir + "/config.json")));
  EXPECT_TRUE(VerifyModelFolder(dir).ok());
  std::ofstream(dir + "/config.json", std::ios::app) << " ";
  const Status changed = VerifyModelFolder(dir);
  EXPECT_NE(changed.message().find("config.json"), std::string::npos) << changed.message();
}

TEST(ModelFolderTest, Sha1FoldersStillVerify) {
  const std::string dir = FreshDir("sha1");
  std::ofstream(dir + "/config.json") << "{}";
  // sha1("{}"), as Python's hashlib gives it.
  std::ofstream(dir + "/checksums.json")
      << R"({"algorithm": "sha1", "files": {"config.json": {"bytes": 2, "sha1": "bf21a9e8fbc5a3846fb05b4fa0859e0917b2202f"}}})";
  EXPECT_TRUE(VerifyModelFolder(dir).ok()) << VerifyModelFolder(dir).message();
  std::ofstream(dir + "/config.json") << "[]";
  const Status changed = VerifyModelFolder(dir);
  EXPECT_NE(changed.message().find("config.json: sha1"), std::string::npos) << changed.message();
  EXPECT_FALSE(ParseChecksums(R"({"algorithm": "md5", "files": {}})").ok());
  EXPECT_FALSE(ParseChecksums(R"({"algorithm": "sha256", "files": {"a": {"bytes": 1, "sha1": "x"}}})").ok())
      << "the per-file key is the algorithm's";
}

// What a folder's checksums.json may hold comes from whoever made the folder: a value of
// the wrong type is Corruption naming it, never an exception out of the daemon (the
// first input below is what checksums_fuzz found: json::value threw on it).
TEST(ModelFolderTest, AChecksumsJsonOfTheWrongShapeIsCorruptionNamingWhatIsWrong) {
  const std::string sha = std::string(64, 'a');
  const std::pair<std::string, std::string> cases[] = {
      {R"({"algorithm": {"model.safetensors": {"bytes": 1234, "sha1": "73130a"}}})", "algorithm {"},
      {R"({"algorithm": 256, "files": {}})", "algorithm 256 is neither"},
      {R"({"files": {}})", "algorithm (none) is neither"},
      {R"({"algorithm": "sha256", "files": {"a": {"bytes": -1, "sha256": ")" + sha + R"("}}})", "a: bytes -1 is not"},
      {R"({"algorithm": "sha256", "files": {"a": {"bytes": 18446744073709551615, "sha256": ")" + sha + R"("}}})",
       "a: bytes 18446744073709551615 is not a file size"},
      {R"({"algorithm": "sha256", "files": {"a": {"bytes": 1, "sha256": "../x"}}})",
       "a: sha256 \"../x\" is not 64 lower-case hex digits"},
      {R"({"algorithm": "sha1", "files": {"a": {"bytes": 1, "sha1": ")" + sha + R"("}}})", "is not 40 lower-case"},
      {R"({"algorithm": "sha256", "files": {"a": {"bytes": 1, "sha256": ")" + std::string(64, 'A') + R"("}}})",
       "is not 64 lower-case hex digits"},
      // Dumped into the message, an algorithm nested 200,000 deep overflowed the stack.
      {R"({"algorithm": )" + std::string(200000, '[') + std::string(200000, ']') + "}",
       "checksums.json nests deeper than 128 levels"},
  };
  for (const auto& [text, want] : cases) {
    StatusOr<ModelChecksums> sums = Status::Internal("not parsed");
    ASSERT_NO_THROW(sums = ParseChecksums(text)) << text;
    ASSERT_FALSE(sums.ok()) << text;
    EXPECT_EQ(sums.status().code(), Status::kDataLoss) << text;
    EXPECT_NE(sums.status().message().find(want), std::string::npos) << sums.status().message();
  }
  auto ok = ParseChecksums(R"({"algorithm": "sha256", "files": {"a": {"bytes": 0, "sha256": ")" + sha + R"("}}})");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->at("a").bytes, 0);
}

// GetArtifacts sends a job's model folder from the shared checkpoint root, where the job's
// own code could write: its `model` made a link to another job's model, or a file in it a
// link to another job's file, is not sent; the folder as written is, every byte of it.
TEST(ModelFolderTest, SendModelFolderReadsNothingThroughALinkOutOfTheJobsFolder) {
  const std::string root = FreshDir("send");
  const std::map<std::string, std::string> files = testing_model::WriteModelFolder(root + "/j-000002/model");
  fs::create_directories(root + "/j-000001");
  const auto send = [&](const std::string& dir, std::map<std::string, std::string>* got) {
    return SendModelFolder(dir, root + "/j-000001", 7, [&](const v1::ArtifactChunk& c) {
      if (!c.file().empty()) (*got)[c.file()] += c.data();
      return true;
    });
  };
  std::map<std::string, std::string> got;
  fs::create_directory_symlink(root + "/j-000002/model", root + "/j-000001/model");
  EXPECT_EQ(send(root + "/j-000001/model", &got).code(), Status::kNotFound);
  EXPECT_TRUE(got.empty());
  fs::remove(root + "/j-000001/model");
  fs::copy(root + "/j-000002/model", root + "/j-000001/model");
  ASSERT_TRUE(send(root + "/j-000001/model", &got).ok());
  for (const auto& [name, bytes] : files) EXPECT_EQ(got[name], bytes) << name;
  got.clear();
  fs::remove(root + "/j-000001/model/config.json");
  fs::create_symlink(root + "/j-000002/model/config.json", root + "/j-000001/model/config.json");
  EXPECT_FALSE(send(root + "/j-000001/model", &got).ok());
  EXPECT_EQ(got.count("config.json"), 0u);
  fs::remove_all(root);
}

}  // namespace
}  // namespace nightshift
