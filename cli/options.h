// The options every verb takes (before or after it) and the session they open. A value
// comes from the command line, else the environment (NIGHTSHIFT_COORDINATOR,
// NIGHTSHIFT_TOKEN), else the settings file (cli/config.h), else the default below.
#ifndef NIGHTSHIFT_CLI_OPTIONS_H_
#define NIGHTSHIFT_CLI_OPTIONS_H_

#include <CLI/CLI.hpp>
#include <string>

#include "cli/verbs/verbs.h"
#include "common/client.h"
#include "common/status.h"

namespace nightshift::cli {

struct GlobalOptions {
  std::string config;                          // --config: the settings file; empty: the usual places
  std::string coordinator = "127.0.0.1:7070";  // --coordinator HOST:PORT
  std::string output = "table";                // -o: table or json
  ClientOptions client;                        // --token, --token-file, --tls-ca, --tls-cert, --tls-key
};

// Declares the global options on the top-level `app`, bound to *o.
void AddGlobalOptions(CLI::App* app, GlobalOptions* o);

// After `app` parsed: fills what the command line left unset from the environment, then
// the settings file. A token given on the command line or in NIGHTSHIFT_TOKEN also keeps
// the file's token and token_file out. Errors name the settings file (and its line).
Status ResolveGlobalOptions(const CLI::App& app, GlobalOptions* o);

// Reads the token (file, or NIGHTSHIFT_TOKEN) and makes the channel; errors name the file.
StatusOr<Session> OpenSession(const GlobalOptions& o);

}  // namespace nightshift::cli

#endif  // NIGHTSHIFT_CLI_OPTIONS_H_
