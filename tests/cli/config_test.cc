#include "cli/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace nightshift {
namespace {

namespace fs = std::filesystem;

class CliConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("cli_config_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

TEST_F(CliConfigTest, ReadsKeysAndResolvesPathsFromTheFilesDirectory) {
  const std::string path = Write("config.yaml",
                                 "coordinator: coord.example.org:7070\n"
                                 "output: json\n"
                                 "token_file: alice.token\n"
                                 "tls_ca: /etc/ssl/ca.crt\n");
  std::map<std::string, std::string> v;
  ASSERT_TRUE(LoadCliConfig(path, true, &v).ok());
  EXPECT_EQ(v["coordinator"], "coord.example.org:7070");
  EXPECT_EQ(v["output"], "json");
  EXPECT_EQ(v["token_file"], (dir_ / "alice.token").string());
  EXPECT_EQ(v["tls_ca"], "/etc/ssl/ca.crt");
  EXPECT_EQ(v.count("token"), 0u);
}

TEST_F(CliConfigTest, MissingFileIsFineUnlessNamed) {
  std::map<std::string, std::string> v;
  EXPECT_TRUE(LoadCliConfig((dir_ / "none.yaml").string(), false, &v).ok());
  EXPECT_TRUE(v.empty());
  const Status named = LoadCliConfig((dir_ / "none.yaml").string(), true, &v);
  EXPECT_FALSE(named.ok());
  EXPECT_NE(named.message().find("none.yaml does not exist"), std::string::npos) << named.message();
  EXPECT_TRUE(LoadCliConfig(Write("empty.yaml", ""), true, &v).ok());
}

TEST_F(CliConfigTest, BadFilesNameTheFileAndTheKeyOrLine) {
  std::map<std::string, std::string> v;
  Status s = LoadCliConfig(Write("a.yaml", "coordinator: x:1\ncoordinater: y:2\n"), true, &v);
  EXPECT_NE(s.message().find("a.yaml line 2: unknown key \"coordinater\""), std::string::npos) << s.message();
  s = LoadCliConfig(Write("b.yaml", "output: xml\n"), true, &v);
  EXPECT_NE(s.message().find("b.yaml line 1: output must be table or json"), std::string::npos) << s.message();
  s = LoadCliConfig(Write("c.yaml", "coordinator: [a, b]\n"), true, &v);
  EXPECT_NE(s.message().find("coordinator must be a single value"), std::string::npos) << s.message();
  s = LoadCliConfig(Write("d.yaml", "coordinator: [a, b\n"), true, &v);
  EXPECT_NE(s.message().find("d.yaml"), std::string::npos) << s.message();
  s = LoadCliConfig(Write("e.yaml", "- a\n- b\n"), true, &v);
  EXPECT_NE(s.message().find("expected key: value pairs"), std::string::npos) << s.message();
}

TEST_F(CliConfigTest, PathComesFromTheFlagTheEnvironmentXdgOrHome) {
  bool named = false;
  EXPECT_EQ(CliConfigPath("/x/flag.yaml", &named), "/x/flag.yaml");
  EXPECT_TRUE(named);
  ::setenv("NIGHTSHIFT_CONFIG", "/x/env.yaml", 1);
  EXPECT_EQ(CliConfigPath("", &named), "/x/env.yaml");
  EXPECT_TRUE(named);
  ::unsetenv("NIGHTSHIFT_CONFIG");
  ::setenv("XDG_CONFIG_HOME", "/x/xdg", 1);
  EXPECT_EQ(CliConfigPath("", &named), "/x/xdg/nightshift/config.yaml");
  EXPECT_FALSE(named);
  ::unsetenv("XDG_CONFIG_HOME");
  ::setenv("HOME", "/x/home", 1);
  EXPECT_EQ(CliConfigPath("", &named), "/x/home/.config/nightshift/config.yaml");
  EXPECT_FALSE(named);
}

}  // namespace
}  // namespace nightshift
