#include "cli/options.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace nightshift::cli {
namespace {

namespace fs = std::filesystem;

class OptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"NIGHTSHIFT_COORDINATOR", "NIGHTSHIFT_TOKEN", "NIGHTSHIFT_CONFIG", "XDG_CONFIG_HOME"})
      ::unsetenv(v);
    dir_ = fs::path(::testing::TempDir()) / ("cli_options_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::setenv("HOME", dir_.c_str(), 1);  // no ~/.config/nightshift/config.yaml unless a test writes one
  }
  void TearDown() override {
    ::unsetenv("NIGHTSHIFT_COORDINATOR");
    ::unsetenv("NIGHTSHIFT_TOKEN");
  }
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  // Parses `line` (global options only) and resolves them.
  Status Resolve(const std::string& line, GlobalOptions* o) {
    CLI::App app;
    AddGlobalOptions(&app, o);
    app.parse(line, false);
    return ResolveGlobalOptions(app, o);
  }
  fs::path dir_;
};

TEST_F(OptionsTest, DefaultsWithoutFlagsEnvironmentOrFile) {
  GlobalOptions o;
  ASSERT_TRUE(Resolve("", &o).ok());
  EXPECT_EQ(o.coordinator, "127.0.0.1:7070");
  EXPECT_EQ(o.output, "table");
  EXPECT_EQ(o.client.token, "");
  EXPECT_EQ(o.client.tls_ca, "");
}

TEST_F(OptionsTest, FlagsBeatTheEnvironmentWhichBeatsTheFile) {
  const std::string config = Write("c.yaml",
                                   "coordinator: file:1\noutput: json\ntoken: file-token\n"
                                   "tls_ca: ca.pem\ntls_cert: /abs/cert.pem\n");
  GlobalOptions from_file;
  ASSERT_TRUE(Resolve("--config " + config, &from_file).ok());
  EXPECT_EQ(from_file.coordinator, "file:1");
  EXPECT_EQ(from_file.output, "json");
  EXPECT_EQ(from_file.client.token, "file-token");
  EXPECT_EQ(from_file.client.tls_ca, (dir_ / "ca.pem").string());  // relative to the file
  EXPECT_EQ(from_file.client.tls_cert, "/abs/cert.pem");

  ::setenv("NIGHTSHIFT_COORDINATOR", "env:2", 1);
  GlobalOptions from_env;
  ASSERT_TRUE(Resolve("--config " + config, &from_env).ok());
  EXPECT_EQ(from_env.coordinator, "env:2");

  GlobalOptions from_flags;
  ASSERT_TRUE(Resolve("--config " + config + " --coordinator flag:3 -o table --tls-ca mine.pem", &from_flags).ok());
  EXPECT_EQ(from_flags.coordinator, "flag:3");
  EXPECT_EQ(from_flags.output, "table");
  EXPECT_EQ(from_flags.client.tls_ca, "mine.pem");
}

TEST_F(OptionsTest, ATokenFromTheCommandLineOrEnvironmentKeepsTheFilesTokensOut) {
  const std::string config = Write("c.yaml", "token: file-token\ntoken_file: alice.token\n");
  GlobalOptions flag;
  ASSERT_TRUE(Resolve("--config " + config + " --token-file bob.token", &flag).ok());
  EXPECT_EQ(flag.client.token, "");  // not the file's token either
  EXPECT_EQ(flag.client.token_file, "bob.token");

  ::setenv("NIGHTSHIFT_TOKEN", "env-token", 1);
  GlobalOptions env;
  ASSERT_TRUE(Resolve("--config " + config, &env).ok());
  EXPECT_EQ(env.client.token, "");  // ResolveToken reads NIGHTSHIFT_TOKEN later
  EXPECT_EQ(env.client.token_file, "");
}

TEST_F(OptionsTest, TheUsualSettingsFileIsReadAndABadOneNamesItsLine) {
  fs::create_directories(dir_ / ".config/nightshift");
  Write(".config/nightshift/config.yaml", "coordinator: home:4\n");
  GlobalOptions o;
  ASSERT_TRUE(Resolve("", &o).ok());
  EXPECT_EQ(o.coordinator, "home:4");

  Write(".config/nightshift/config.yaml", "coordinator: home:4\ncoordinater: typo\n");
  GlobalOptions bad;
  const Status s = Resolve("", &bad);
  EXPECT_NE(s.message().find("line 2: unknown key \"coordinater\""), std::string::npos) << s.message();
  GlobalOptions missing;
  EXPECT_NE(Resolve("--config " + (dir_ / "none.yaml").string(), &missing).message().find("does not exist"),
            std::string::npos);
}

TEST_F(OptionsTest, OpenSessionNamesAnUnreadableCredentialFile) {
  GlobalOptions o;
  o.client.token_file = (dir_ / "none.token").string();
  auto s = OpenSession(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("none.token"), std::string::npos) << s.status().message();

  GlobalOptions json;
  json.output = "json";
  auto ok = OpenSession(json);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_TRUE(ok->json);
  EXPECT_NE(ok->channel, nullptr);
}

}  // namespace
}  // namespace nightshift::cli
