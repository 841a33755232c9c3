// Running a command line tool and reading what it printed: the coordinator drives Slurm
// through its commands (sbatch, squeue, scancel), as TorchX and Determined do. Behind an
// interface so that the code that builds the commands and reads their output is tested
// with a fake.
#ifndef NIGHTSHIFT_COMMON_COMMAND_H_
#define NIGHTSHIFT_COMMON_COMMAND_H_

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace nightshift {

struct CommandResult {
  int exit_code = -1;  // the program's exit code; 128 + N when killed by signal N
  std::string out, err;
};

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Runs argv[0] (looked up in the PATH it gets: `env`'s, else ours) with `input` on its
  // standard input and `env` added to this process's environment. An error only when it could not be started or ran past
  // `timeout_seconds` (then killed): a program that ran and failed is a result.
  virtual StatusOr<CommandResult> Run(const std::vector<std::string>& argv, const std::string& input,
                                      const std::map<std::string, std::string>& env, double timeout_seconds) = 0;
};

// The real one: fork and exec, pipes for the three streams (at most 16 MiB of each output
// is kept: more on stdout is RESOURCE_EXHAUSTED, more on stderr is cut).
class SubprocessRunner : public CommandRunner {
 public:
  StatusOr<CommandResult> Run(const std::vector<std::string>& argv, const std::string& input,
                              const std::map<std::string, std::string>& env, double timeout_seconds) override;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_COMMAND_H_
