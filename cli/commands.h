// The command table: every `nightshift NOUN VERB`, its help line and its verb function
// (cli/verbs/). main adds them all as subcommands, parses, and runs the chosen one.
#ifndef NIGHTSHIFT_CLI_COMMANDS_H_
#define NIGHTSHIFT_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <vector>

#include "cli/verbs/verbs.h"

namespace nightshift::cli {

struct Noun {
  const char* name;  // "job"
  const char* help;  // one line, shown by `nightshift --help`
};

struct Verb {
  const char* noun;  // a Noun's name
  const char* name;  // "submit"
  const char* help;  // one line, shown by `nightshift NOUN --help`
  // Declares the verb's positionals and flags; returns the handler bound to them.
  Handler (*declare)(CLI::App* cmd);
};

// In --help order; every verb's noun is in Nouns().
const std::vector<Noun>& Nouns();
const std::vector<Verb>& Verbs();

// A verb as added to the command line.
struct Command {
  const Verb* verb;
  CLI::App* cmd;  // its subcommand, owned by the app
  Handler run;
};

// Adds every noun (which then requires one of its verbs) and verb to `app`.
std::vector<Command> AddCommands(CLI::App* app);

// The command the parsed command line chose; nullptr when none was (CLI11 refuses
// a command line without one, so after a successful parse there is one).
const Command* Chosen(const std::vector<Command>& commands);

}  // namespace nightshift::cli

#endif  // NIGHTSHIFT_CLI_COMMANDS_H_
