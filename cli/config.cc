#include "cli/config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <set>

namespace nightshift {

namespace fs = std::filesystem;

std::string CliConfigPath(const std::string& flag, bool* explicit_path) {
  *explicit_path = true;
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("NIGHTSHIFT_CONFIG"); env && *env) return env;
  *explicit_path = false;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg)
    return std::string(xdg) + "/nightshift/config.yaml";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.config/nightshift/config.yaml";
  return "";
}

Status LoadCliConfig(const std::string& path, bool must_exist, std::map<std::string, std::string>* values) {
  if (path.empty()) return Status::OK();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (!must_exist) return Status::OK();
    return Status::InvalidArgument("config file " + path + " does not exist");
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config file " + path + ": " + e.what());
  }
  if (root.IsNull()) return Status::OK();  // empty file
  if (!root.IsMap()) return Status::InvalidArgument("config file " + path + ": expected key: value pairs");
  static const std::set<std::string> kKeys = {"coordinator", "output", "token", "token_file",
                                              "tls_ca", "tls_cert", "tls_key"};
  static const std::set<std::string> kPaths = {"token_file", "tls_ca", "tls_cert", "tls_key"};
  const fs::path dir = fs::absolute(path).parent_path();
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      return Status::InvalidArgument("config file " + path + " line " + std::to_string(kv.first.Mark().line + 1) +
                                     ": a key must be a name");
    const std::string key = kv.first.as<std::string>();
    const std::string where = "config file " + path + " line " + std::to_string(kv.first.Mark().line + 1);
    if (!kKeys.count(key))
      return Status::InvalidArgument(where + ": unknown key \"" + key +
                                     "\" (known: coordinator, output, token, token_file, tls_ca, tls_cert, tls_key)");
    if (!kv.second.IsScalar()) return Status::InvalidArgument(where + ": " + key + " must be a single value");
    std::string value = kv.second.as<std::string>();
    if (key == "output" && value != "table" && value != "json")
      return Status::InvalidArgument(where + ": output must be table or json, not \"" + value + "\"");
    if (kPaths.count(key) && !value.empty() && fs::path(value).is_relative()) value = (dir / value).string();
    (*values)[key] = value;
  }
  return Status::OK();
}

}  // namespace nightshift
