// The CLI's settings file, so that users need not repeat --coordinator and credentials:
//
//   # ~/.config/nightshift/config.yaml
//   coordinator: coord.example.org:7070
//   output: table            # or json
//   token_file: alice.token  # relative paths: from the file's own directory
//   tls_ca: ca.crt
//
// Keys: coordinator, output, token, token_file, tls_ca, tls_cert, tls_key. Precedence,
// highest first: command-line flags, the environment (NIGHTSHIFT_COORDINATOR,
// NIGHTSHIFT_TOKEN), this file, built-in defaults.
#ifndef NIGHTSHIFT_CLI_CONFIG_H_
#define NIGHTSHIFT_CLI_CONFIG_H_

#include <map>
#include <string>

#include "common/status.h"

namespace nightshift {

// The file to read: `flag` (--config) if set, else $NIGHTSHIFT_CONFIG, else
// $XDG_CONFIG_HOME/nightshift/config.yaml, else $HOME/.config/nightshift/config.yaml.
// *explicit_path says whether the user named it (then it must exist).
std::string CliConfigPath(const std::string& flag, bool* explicit_path);

// Reads the file's keys into *values (key -> value; paths made absolute). A missing file
// is fine unless `must_exist`; anything else wrong is an error naming the file, and the
// key or line.
Status LoadCliConfig(const std::string& path, bool must_exist, std::map<std::string, std::string>* values);

}  // namespace nightshift

#endif  // NIGHTSHIFT_CLI_CONFIG_H_
