// nightshift: the user and operator CLI (noun verb, like kubectl). The verbs are the
// table in cli/commands.cc; their exit codes come from cli/exit_codes.h.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/options.h"

using namespace nightshift::cli;

int main(int argc, char** argv) {
  CLI::App app{"nightshift: submit and follow training jobs, operate the cluster"};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--coordinator, -o) also after the verb
  GlobalOptions options;
  AddGlobalOptions(&app, &options);
  const std::vector<Command> commands = AddCommands(&app);
  app.footer(kExitCodesHelp);  // after the verbs: theirs would inherit it
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the help, or the error and "Run with --help"
    return ExitCodeOf(e);
  }

  if (nightshift::Status s = ResolveGlobalOptions(app, &options); !s.ok()) return LocalError(s);
  auto session = OpenSession(options);
  if (!session.ok()) return LocalError(session.status());
  const Command* chosen = Chosen(commands);
  return chosen ? chosen->run(session.value()) : kExitUsage;
}
