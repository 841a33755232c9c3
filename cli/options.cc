#include "cli/options.h"

#include <cstdlib>
#include <map>

#include "cli/config.h"

namespace nightshift::cli {
namespace {

bool EnvSet(const char* name) {
  const char* v = name ? std::getenv(name) : nullptr;
  return v != nullptr && *v != '\0';
}

}  // namespace

void AddGlobalOptions(CLI::App* app, GlobalOptions* o) {
  app->add_option("--config", o->config,
                  "settings file (default ~/.config/nightshift/config.yaml; env NIGHTSHIFT_CONFIG)");
  app->add_option("--coordinator", o->coordinator, "coordinator HOST:PORT (env NIGHTSHIFT_COORDINATOR)");
  app->add_option("-o,--output", o->output, "table or json (csv: job metrics only)")
      ->check(CLI::IsMember({"table", "json", "csv"}));
  app->add_option("--token", o->client.token,
                  "bearer token (else --token-file, else env NIGHTSHIFT_TOKEN); warning: a command line is readable "
                  "by every user of this machine (ps): prefer --token-file or NIGHTSHIFT_TOKEN");
  app->add_option("--token-file", o->client.token_file, "file whose first line is the bearer token");
  app->add_option("--tls-ca", o->client.tls_ca, "PEM CA of the coordinator's certificate: connect with TLS");
  app->add_option("--tls-cert", o->client.tls_cert, "PEM client certificate (mutual TLS)");
  app->add_option("--tls-key", o->client.tls_key, "PEM key of --tls-cert");
}

Status ResolveGlobalOptions(const CLI::App& app, GlobalOptions* o) {
  bool named = false;
  const std::string path = CliConfigPath(o->config, &named);
  std::map<std::string, std::string> file;
  NS_RETURN_IF_ERROR(LoadCliConfig(path, named, &file));
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };
  const auto fill = [&](const char* flag, const char* env, const char* key, std::string* value) {
    if (given(flag)) return;
    if (EnvSet(env)) {
      *value = std::getenv(env);
    } else if (auto it = file.find(key); it != file.end()) {
      *value = it->second;
    }
  };
  fill("--coordinator", "NIGHTSHIFT_COORDINATOR", "coordinator", &o->coordinator);
  fill("--output", nullptr, "output", &o->output);
  if (!given("--token") && !given("--token-file") && !EnvSet("NIGHTSHIFT_TOKEN")) {
    fill("--token", nullptr, "token", &o->client.token);
    fill("--token-file", nullptr, "token_file", &o->client.token_file);
  }
  fill("--tls-ca", nullptr, "tls_ca", &o->client.tls_ca);
  fill("--tls-cert", nullptr, "tls_cert", &o->client.tls_cert);
  fill("--tls-key", nullptr, "tls_key", &o->client.tls_key);
  return Status::OK();
}

StatusOr<Session> OpenSession(const GlobalOptions& o) {
  ClientOptions client = o.client;
  client.address = o.coordinator;
  NS_RETURN_IF_ERROR(ResolveToken(&client));
  auto channel = MakeChannel(client);
  if (!channel.ok()) return channel.status();
  return Session{channel.value(), o.output == "json", o.output == "csv"};
}

}  // namespace nightshift::cli
