// Path confinement of job data on the worker (--data-root), and nightshift-prepare's command line.
#include "worker/input_files.h"

#include <CLI/CLI.hpp>
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

// The worker's own folders (work dir, checkpoint root) hold other jobs' checkpoints and
// models: a path into them is refused even where a root (or --allow-any-path's "/") would
// allow it, and a data root overlapping them keeps the worker from starting.
TEST_F(ConfineTest, TheWorkersOwnFoldersAreNoJobsInputAndNoDataRoot) {
  fs::create_directories(dir_ / "root/checkpoints/j-000002/model");
  const std::vector<std::string> own = {(dir_ / "work").string(), fs::canonical(dir_ / "root/checkpoints").string()};
  const std::string model = (dir_ / "root/checkpoints/j-000002/model").string();
  std::string real;
  ASSERT_TRUE(ConfinePath("model.init_from", model, roots_, &real).ok());  // inside the root
  const Status refused = OutsideOwnFolders("model.init_from", model, real, own);
  EXPECT_EQ(refused.code(), Status::kInvalidArgument);
  EXPECT_NE(refused.message().find("model.init_from '" + model + "' resolves to " + real + ", inside this worker's own " +
                                   own[1]),
            std::string::npos)
      << refused.ToString();
  fs::create_directory_symlink(dir_ / "root/checkpoints/j-000002", dir_ / "root/data/mine");
  ASSERT_TRUE(ConfinePath("model.init_from", (dir_ / "root/data/mine/model").string(), roots_, &real).ok());
  EXPECT_EQ(OutsideOwnFolders("model.init_from", (dir_ / "root/data/mine/model").string(), real, own).code(),
            Status::kInvalidArgument);  // a link into them, resolved
  ASSERT_TRUE(ConfinePath("data.path", (dir_ / "root/data/ham").string(), roots_, &real).ok());
  EXPECT_TRUE(OutsideOwnFolders("data.path", (dir_ / "root/data/ham").string(), real, own).ok());

  const Status overlap = RootsApartFromOwnFolders(roots_, own);  // the root holds the checkpoint root
  EXPECT_EQ(overlap.code(), Status::kInvalidArgument);
  EXPECT_NE(overlap.message().find("--data-root " + roots_[0] + " and the worker's own " + own[1] + " overlap"),
            std::string::npos)
      << overlap.ToString();
  EXPECT_EQ(RootsApartFromOwnFolders({own[1] + "/j-000002"}, own).code(), Status::kInvalidArgument);  // inside
  EXPECT_TRUE(RootsApartFromOwnFolders({(dir_ / "secret").string()}, own).ok());
  EXPECT_TRUE(RootsApartFromOwnFolders({"/"}, own).ok());  // --allow-any-path: the paths are checked instead
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

// Missing: the flag's error (the worker's bad-flags exit, which fails a Kubernetes Job for
// good). Unresolvable otherwise (a stale mount's ESTALE or EIO; here a link to itself):
// the node's, not INVALID_ARGUMENT (the worker exits 1, tried again elsewhere).
TEST(ResolveRootsTest, MissingRootIsAnError) {
  std::vector<std::string> roots = {"/nonexistent/nightshift-root"};
  EXPECT_EQ(ResolveRoots(&roots).code(), Status::kInvalidArgument);
  const std::string loop = ::testing::TempDir() + "/nightshift-root-loop." + std::to_string(::getpid());
  fs::remove(loop);
  fs::create_symlink(loop, loop);
  std::vector<std::string> looped = {loop};
  const Status s = ResolveRoots(&looped);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), Status::kInvalidArgument) << s.ToString();
  fs::remove(loop);
}

// What nightshift-prepare parses from PrepareArgs(), as its main() does.
PrepareCommand ParseBack(const PrepareCommand& command) {
  std::vector<std::string> args = PrepareArgs(command);
  args.insert(args.begin(), "nightshift-prepare");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  CLI::App app;
  PrepareCommand back;
  AddPrepareFlags(&app, &back);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    ADD_FAILURE() << "nightshift-prepare refuses its own argv: " << e.what();
  }
  return back;
}

TEST(PrepareCommandTest, ArgsRoundTripThroughTheFlags) {
  PrepareCommand c;
  c.options.path = "/data/mail box";
  c.options.format = "jsonl";
  c.options.text_field = "body";
  c.options.label_field = "category";
  c.options.max_samples = 123456789012;
  c.options.validation_fraction = 0.1234567891;  // std::to_string's 6 decimals lost this
  c.options.seed = 18446744073709551557ull;      // above INT64_MAX
  c.options.vocab_size = 321;
  c.options.max_len = 77;
  c.options.classifier = false;
  c.options.roots = {"/srv/a", "/srv/b c"};
  c.options.max_line_bytes = 4096;
  c.options.max_input_bytes = int64_t{1} << 40;
  c.output_dir = "/tmp/out dir";
  c.threads = 7;
  for (const PrepareCommand& sent : {c, PrepareCommand{}}) {  // the defaults: empty strings, true
    const PrepareCommand back = ParseBack(sent);
    EXPECT_EQ(back.options.path, sent.options.path);
    EXPECT_EQ(back.options.format, sent.options.format);
    EXPECT_EQ(back.options.text_field, sent.options.text_field);
    EXPECT_EQ(back.options.label_field, sent.options.label_field);
    EXPECT_EQ(back.options.max_samples, sent.options.max_samples);
    EXPECT_EQ(back.options.validation_fraction, sent.options.validation_fraction);
    EXPECT_EQ(back.options.seed, sent.options.seed);
    EXPECT_EQ(back.options.vocab_size, sent.options.vocab_size);
    EXPECT_EQ(back.options.max_len, sent.options.max_len);
    EXPECT_EQ(back.options.classifier, sent.options.classifier);
    EXPECT_EQ(back.options.roots, sent.options.roots);
    EXPECT_EQ(back.options.max_line_bytes, sent.options.max_line_bytes);
    EXPECT_EQ(back.options.max_input_bytes, sent.options.max_input_bytes);
    EXPECT_EQ(back.output_dir, sent.output_dir);
    EXPECT_EQ(back.threads, sent.threads);
    EXPECT_EQ(PrepareArgs(back), PrepareArgs(sent));
  }
}

// Entries built before keep their keys: the defaults fingerprint as they always did.
TEST(PrepareCommandTest, FingerprintOfTheDefaultsIsUnchanged) {
  EXPECT_EQ(OptionsFingerprint(PrepOptions{}),
            "prep-v2|sentencepiece-unigram|format=text_dir|text_field=text|label_field=|max_samples=0|"
            "validation_fraction=0.2|seed=1234|vocab_size=8000|max_len=512|classifier=1");
}

// Two splits are two entries, however close their fractions (an ostream's 6 digits made
// 0.1234567 and 0.1234568 one key, so one would be served the other's split).
TEST(PrepareCommandTest, FingerprintTellsCloseFractionsApart) {
  PrepOptions a, b;
  a.validation_fraction = 0.1234567;
  b.validation_fraction = 0.1234568;
  EXPECT_NE(OptionsFingerprint(a), OptionsFingerprint(b));
  PrepOptions c = a;
  c.path = "/elsewhere";
  c.roots = {"/srv"};
  c.max_line_bytes = 1;
  c.max_input_bytes = 1;
  EXPECT_EQ(OptionsFingerprint(a), OptionsFingerprint(c));  // where and whether, not what
}

}  // namespace
}  // namespace nightshift
