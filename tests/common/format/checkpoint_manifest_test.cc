// The checkpoint manifest (common/format/checkpoint_manifest.h): what is written reads
// back the same, 64-bit checksums included; version 1 documents still parse; anything
// damaged or naming a file outside its folder is refused naming what is wrong; files on
// disk are verified against their entries.
#include "common/format/checkpoint_manifest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/format/shard.h"

namespace nightshift::format {
namespace {

namespace fs = std::filesystem;

CheckpointManifest Example() {
  CheckpointManifest m;
  m.position = {{"step", 40}, {"epoch", 1}, {"rng_cpu", "00ff"}};
  m.fingerprint = "seed=1;batch_size=32";
  m.attempt = 3;
  m.files["model.pt"] = FileEntry("weights");
  m.files["optimizer.pt"] = {12, "", 0xfedcba9876543210ULL};  // version 2's FNV-1a, past 2^53: a decimal string
  return m;
}

TEST(CheckpointManifestTest, WhatIsWrittenReadsBackTheSame) {
  CheckpointManifest back;
  ASSERT_EQ(ParseManifest(ManifestText(Example()), &back), "");
  EXPECT_EQ(back.version, kCheckpointVersion);
  EXPECT_EQ(back.position, Example().position);
  EXPECT_EQ(back.fingerprint, "seed=1;batch_size=32");
  EXPECT_EQ(back.attempt, 3);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files["model.pt"].bytes, 7u);
  // SHA-256 of "weights" (what we write); an entry with FNV-1a only (versions 1 and 2) too.
  EXPECT_EQ(back.files["model.pt"].sha256, crypto::Sha256Hex("weights"));
  EXPECT_EQ(back.files["optimizer.pt"].sha256, "");
  EXPECT_EQ(back.files["optimizer.pt"].fnv1a64, 0xfedcba9876543210ULL);

  CheckpointManifest no_attempt = Example();
  no_attempt.attempt = -1;
  EXPECT_EQ(ManifestText(no_attempt).find("\"attempt\""), std::string::npos);
  ASSERT_EQ(ParseManifest(ManifestText(no_attempt), &back), "");
  EXPECT_EQ(back.attempt, -1);
  EXPECT_EQ(back.best_step, 0);
  EXPECT_EQ(ManifestText(no_attempt).find("\"best\""), std::string::npos);

  CheckpointManifest best = Example();  // export.best's older checkpoint, named with its digest
  best.best_step = 20;
  best.best_manifest_sha256 = crypto::Sha256Hex("step 20's manifest");
  ASSERT_EQ(ParseManifest(ManifestText(best), &back), "");
  EXPECT_EQ(back.best_step, 20);
  EXPECT_EQ(back.best_manifest_sha256, best.best_manifest_sha256);
}

TEST(CheckpointManifestTest, AVersionOneDocumentParsesWithItsPositionAtTheTop) {
  CheckpointManifest m;
  const std::string v1 = R"({"magic": "nightshift-checkpoint", "version": 1, "step": 7, "epoch": 0,
                             "batch_in_epoch": 7, "rng_cpu": "00"})";
  ASSERT_EQ(ParseManifest(v1, &m), "");
  EXPECT_EQ(m.version, 1);
  EXPECT_EQ(m.position.at("step"), 7);
  EXPECT_TRUE(m.files.empty());
  EXPECT_EQ(m.attempt, -1);
  // No version at all is version 0, which no reader reads (not damage to skip past).
  ASSERT_EQ(ParseManifest(R"({"magic": "nightshift-checkpoint"})", &m), "");
  EXPECT_EQ(m.version, 0);
}

TEST(CheckpointManifestTest, ALaterVersionParsesWithItsVersionAndAttemptWhateverElseChanged) {
  CheckpointManifest m;
  ASSERT_EQ(ParseManifest(R"({"magic": "nightshift-checkpoint", "version": 4, "attempt": 4,
                              "fingerprint": {"new": "shape"}, "files": ["model.pt"]})", &m), "");
  EXPECT_EQ(m.version, 4);
  EXPECT_EQ(m.attempt, 4);
  EXPECT_TRUE(m.files.empty());
  // The same fields in a version this code writes are damage.
  EXPECT_NE(ParseManifest(R"({"magic": "nightshift-checkpoint", "version": 3, "attempt": 4,
                              "fingerprint": {"new": "shape"}, "files": ["model.pt"]})", &m), "");
}

TEST(CheckpointManifestTest, DamageAndNamesOutsideTheFolderAreRefusedNamingWhatIsWrong) {
  const std::pair<std::string, std::string> cases[] = {
      {"{not json", "not a JSON object"},
      {R"({"magic": "something-else", "version": 2})", "not a nightshift-checkpoint"},
      {R"({"magic": "nightshift-checkpoint", "version": "2"})", "version is not an integer"},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "attempt": "x"})", "attempt is not an integer"},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "files": []})", "\"files\" is not an object"},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "files": {"../../etc/passwd": {"bytes": 1, "fnv1a64": "1"}}})",
       "lists a file named \"../../etc/passwd\""},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "files": {"COMPLETE": {"bytes": 1, "fnv1a64": "1"}}})",
       "lists a file named \"COMPLETE\""},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "files": {"manifest.json": {"bytes": 1, "fnv1a64": "1"}}})",
       "lists a file named \"manifest.json\""},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "files": {"model.pt": {"bytes": 1}}})",
       "model.pt has no sha256 (or fnv1a64)"},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "files": {"model.pt": {"bytes": 1, "fnv1a64": "-5"}}})",
       "model.pt has no sha256 (or fnv1a64)"},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "files": {"model.pt": {"bytes": -1, "fnv1a64": "5"}}})",
       "model.pt has no bytes"},
      {R"({"magic": "nightshift-checkpoint", "version": 3, "files": {"model.pt": {"bytes": 1, "sha256": "ABC"}}})",
       "model.pt's sha256 is not 64 lower-case hex digits"},
      // Numbers past an int (manifest_fuzz found the version): cut to one, a version would
      // read as another, an attempt as an older or an absent one and pass the fence.
      {R"({"magic": "nightshift-checkpoint", "version": 8888888888888881})",
       "version 8888888888888881 is not a version number"},
      {R"({"magic": "nightshift-checkpoint", "version": -4294967294})", "version -4294967294 is not a version number"},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "attempt": 4294967297})",
       "attempt 4294967297 is not an attempt number"},
      {R"({"magic": "nightshift-checkpoint", "version": 3, "attempt": 4294967297})",
       "attempt 4294967297 is not an attempt number"},
      {R"({"magic": "nightshift-checkpoint", "version": 2, "attempt": -2})", "attempt -2 is not an attempt number"},
      {R"({"magic": "nightshift-checkpoint", "version": 3, "best": {"step": 0, "manifest_sha256": ")" +
           std::string(64, 'a') + R"("}})",
       "best is not {\"step\": a positive step"},
      {R"({"magic": "nightshift-checkpoint", "version": 3, "best": {"step": 20, "manifest_sha256": "ABC"}})",
       "best is not {\"step\": a positive step"},
      {R"({"magic": "nightshift-checkpoint", "version": 3, "best": 20})", "best is not {\"step\": a positive step"},
      // 200,000 deep, a magic overflowed the stack where it was copied to be compared
      // (manifest_fuzz, run on that input).
      {R"({"magic": )" + std::string(200000, '[') + std::string(200000, ']') + "}",
       "manifest.json nests deeper than 128 levels"},
  };
  for (const auto& [text, want] : cases) {
    CheckpointManifest m = Example();
    const std::string err = ParseManifest(text, &m);
    EXPECT_NE(err.find(want), std::string::npos) << text << " -> " << err;
    EXPECT_EQ(m.fingerprint, Example().fingerprint) << "a refused manifest changed the output: " << text;
  }
}

TEST(CheckpointManifestTest, FilesOnDiskAreVerifiedAgainstTheirEntries) {
  const fs::path dir = fs::path(::testing::TempDir()) / "manifest_verify";
  fs::remove_all(dir);
  fs::create_directories(dir);
  CheckpointManifest m;
  const std::string model(3 << 20, 'w');  // several read buffers
  m.files["model.pt"] = FileEntry(model);
  m.files["optimizer.pt"] = FileEntry("adam");
  std::ofstream(dir / "model.pt", std::ios::binary) << model;
  std::ofstream(dir / "optimizer.pt", std::ios::binary) << "adam";
  std::ofstream(dir / "manifest.json") << ManifestText(m);

  CheckpointManifest read;
  ASSERT_EQ(ReadManifest(dir.string(), &read), "");
  EXPECT_EQ(VerifyFiles(dir.string(), read), "");

  std::ofstream(dir / "optimizer.pt", std::ios::binary) << "adaM";  // same size, other bytes
  EXPECT_EQ(VerifyFiles(dir.string(), read), (dir / "optimizer.pt").string() + " does not match its checksum in manifest.json");
  std::ofstream(dir / "optimizer.pt", std::ios::binary) << "ada";
  EXPECT_EQ(VerifyFiles(dir.string(), read), (dir / "optimizer.pt").string() + " is truncated (3 of 4 bytes)");
  fs::remove(dir / "optimizer.pt");
  EXPECT_EQ(VerifyFiles(dir.string(), read), "cannot read " + (dir / "optimizer.pt").string());

  std::ofstream(dir / "manifest.json") << "{}";
  EXPECT_EQ(ReadManifest(dir.string(), &read), dir.string() + "/manifest.json is not a nightshift-checkpoint");
  fs::remove(dir / "manifest.json");
  EXPECT_EQ(ReadManifest(dir.string(), &read), "cannot read " + dir.string() + "/manifest.json");
}

TEST(CheckpointManifestTest, OnlyPlainNamesArePlainFileNames) {
  for (const char* ok : {"model.pt", "a", "tokenizer.model", "..x", "x.."}) EXPECT_TRUE(IsPlainFileName(ok)) << ok;
  for (const char* bad : {"", ".", "..", "a/b", "/abs", "a\\b", "tab\there", "del\x7f"})
    EXPECT_FALSE(IsPlainFileName(bad)) << bad;
  EXPECT_FALSE(IsPlainFileName(std::string(256, 'a')));
  EXPECT_TRUE(IsPlainFileName(std::string(255, 'a')));
}

}  // namespace
}  // namespace nightshift::format
