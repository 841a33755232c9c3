// The verbs: one function per `nightshift NOUN VERB`, defined in cli/verbs/NOUN.cc and
// listed, with its help line, in the table in cli/commands.cc.
//
// A verb function declares the verb's positionals and flags on its subcommand, bound to
// storage that the handler it returns owns; main runs that handler once the command line
// parsed. To add a verb: write the function in cli/verbs/NOUN.cc, declare it here, add
// its row to the table. Its output goes to stdout (table, or JSON with -o json), errors
// to stderr, and its exit code comes from cli/exit_codes.h.
#ifndef NIGHTSHIFT_CLI_VERBS_VERBS_H_
#define NIGHTSHIFT_CLI_VERBS_VERBS_H_

#include <grpcpp/channel.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <memory>

namespace nightshift::cli {

// What a verb runs with: the connection and the global output choice.
struct Session {
  std::shared_ptr<grpc::Channel> channel;  // to the coordinator, credentials attached
  bool json = false;                        // -o json (else table)
  bool csv = false;                         // -o csv (job metrics; the others print the table)

  // The deadline of a unary call: 30 s from now. Streams (watch, logs) have none.
  std::chrono::system_clock::time_point Deadline() const {
    return std::chrono::system_clock::now() + std::chrono::seconds(30);
  }
};

// Runs a parsed verb; returns its exit code.
using Handler = std::function<int(const Session&)>;

// A verb that takes one ID and runs `run` with it.
inline Handler WithId(CLI::App* cmd, int (*run)(const Session&, const std::string&)) {
  auto id = std::make_shared<std::string>();
  cmd->add_option("ID", *id)->required();
  return [id, run](const Session& s) { return run(s, *id); };
}

// cli/verbs/job.cc
Handler JobSubmit(CLI::App* cmd);
Handler JobList(CLI::App* cmd);
Handler JobDescribe(CLI::App* cmd);
Handler JobWatch(CLI::App* cmd);
Handler JobLogs(CLI::App* cmd);
Handler JobCancel(CLI::App* cmd);
Handler JobDelete(CLI::App* cmd);
Handler JobArtifacts(CLI::App* cmd);
Handler JobMetrics(CLI::App* cmd);
// cli/verbs/sweep.cc
Handler SweepSubmit(CLI::App* cmd);
Handler SweepList(CLI::App* cmd);
Handler SweepDescribe(CLI::App* cmd);
Handler SweepCancel(CLI::App* cmd);
// cli/verbs/worker.cc
Handler WorkerList(CLI::App* cmd);
Handler WorkerCordon(CLI::App* cmd);
Handler WorkerUncordon(CLI::App* cmd);
Handler WorkerDrain(CLI::App* cmd);
Handler WorkerRemove(CLI::App* cmd);
// cli/verbs/cluster.cc
Handler ClusterStatus(CLI::App* cmd);
// cli/verbs/cache.cc
Handler CacheList(CLI::App* cmd);
Handler CacheStats(CLI::App* cmd);
Handler CacheEvict(CLI::App* cmd);

}  // namespace nightshift::cli

#endif  // NIGHTSHIFT_CLI_VERBS_VERBS_H_
