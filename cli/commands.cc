#include "cli/commands.h"

#include <cstring>

namespace nightshift::cli {

// cli/verbs/predict.cc: `nightshift predict ...` runs nightshift-predict (a noun without
// verbs: its row in Verbs() has an empty name).
Handler Predict(CLI::App* cmd);

const std::vector<Noun>& Nouns() {
  static const std::vector<Noun> kNouns = {
      {"job", "jobs"},
      {"sweep", "hyperparameter sweeps: grid, random, ASHA; each trial a job (docs/sweeps.md)"},
      {"worker", "workers"},
      {"cluster", "the cluster as a whole"},
      {"cache", "the workers' preprocessed-feature caches"},
      {"predict", "run an exported model folder in C++: classify, score or continue texts (nightshift-predict --help)"},
  };
  return kNouns;
}

const std::vector<Verb>& Verbs() {
  static const std::vector<Verb> kVerbs = {
      {"job", "submit", "submit a job spec (YAML or JSON); prints the job id", JobSubmit},
      {"job", "list", "list jobs", JobList},
      {"job", "describe", "show a job: state, progress, metrics, events", JobDescribe},
      {"job", "watch", "follow a job's progress to its end", JobWatch},
      {"job", "logs", "print a rank's log (relayed by the coordinator from its worker)", JobLogs},
      {"job", "cancel", "cancel a job", JobCancel},
      {"job", "delete", "remove a finished job and its history now (else it goes after the retention period)",
       JobDelete},
      {"job", "artifacts", "download a job's exported model into DIR (checksums verified)", JobArtifacts},
      {"job", "metrics", "a job's evaluations per epoch and its loss curve (-o json|csv)", JobMetrics},
      {"sweep", "submit", "submit a sweep file (YAML); prints the sweep id", SweepSubmit},
      {"sweep", "list", "list sweeps", SweepList},
      {"sweep", "describe", "show a sweep: its trials with their params, rung, metric and state, and its decisions",
       SweepDescribe},
      {"sweep", "cancel", "cancel a sweep and its unfinished trials", SweepCancel},
      {"worker", "list", "list workers", WorkerList},
      {"worker", "cordon", "place no new work on a worker (running jobs stay)", WorkerCordon},
      {"worker", "uncordon", "accept new work on a worker again", WorkerUncordon},
      {"worker", "drain", "cordon a worker and move its jobs: they checkpoint and resume elsewhere", WorkerDrain},
      {"worker", "remove", "forget a worker now (its jobs restart elsewhere; the name may register again)", WorkerRemove},
      {"cluster", "status", "workers, slots and the queue", ClusterStatus},
      {"cache", "list", "entries of every worker's cache", CacheList},
      {"cache", "stats", "entries, bytes, hits, misses, build seconds saved", CacheStats},
      {"cache", "evict", "evict an entry (KEY) or every entry (--all); entries in use stay", CacheEvict},
      {"predict", "", "run an exported model folder in C++: classify, score or continue texts (nightshift-predict --help)", Predict},
  };
  return kVerbs;
}

std::vector<Command> AddCommands(CLI::App* app) {
  std::vector<Command> commands;
  for (const Noun& noun : Nouns()) {
    CLI::App* group = app->add_subcommand(noun.name, noun.help);
    for (const Verb& verb : Verbs()) {
      if (std::strcmp(verb.noun, noun.name) != 0) continue;
      // A verb without a name is the noun itself (`nightshift predict ...`).
      CLI::App* cmd = verb.name[0] == '\0' ? group : group->require_subcommand(1)->add_subcommand(verb.name, verb.help);
      commands.push_back({&verb, cmd, verb.declare(cmd)});
    }
  }
  return commands;
}

const Command* Chosen(const std::vector<Command>& commands) {
  for (const Command& c : commands)
    if (c.cmd->parsed()) return &c;
  return nullptr;
}

}  // namespace nightshift::cli
