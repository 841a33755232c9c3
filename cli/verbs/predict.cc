// nightshift predict ARGS...: runs an exported model with nightshift-predict, the C++
// predictor that lives beside this binary (worker/predict/main.cc: LibTorch and
// sentencepiece, which this gRPC process does not link). Every argument after `predict`
// is passed on unchanged; -o json before `predict` is passed on as well.
#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/verbs/verbs.h"

namespace nightshift::cli {

// Declared in cli/commands.cc with its row.
Handler Predict(CLI::App* cmd);

Handler Predict(CLI::App* cmd) {
  // The rest of the line is nightshift-predict's, its flags and --help included: nothing
  // falls through to the global options (so -o after `predict` goes to it, too).
  cmd->prefix_command();
  cmd->set_help_flag();
  cmd->allow_extras();
  cmd->fallthrough(false);
  return [cmd](const Session& session) -> int {
    char self[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    const std::string binary = dir + "nightshift-predict";
    std::vector<std::string> args{binary};
    for (const std::string& a : cmd->remaining()) args.push_back(a);
    bool has_output = false;
    for (const std::string& a : args) has_output = has_output || a == "-o" || a.rfind("--output", 0) == 0;
    if (session.json && !has_output) args.insert(args.end(), {"-o", "json"});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    ::execv(binary.c_str(), argv.data());
    std::fprintf(stderr, "nightshift predict: cannot run %s: %s (it is built and installed beside nightshift)\n",
                 binary.c_str(), std::strerror(errno));
    return kExitUsage;
  };
}

}  // namespace nightshift::cli
