#include "cli/commands.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "cli/exit_codes.h"
#include "cli/options.h"

namespace nightshift::cli {
namespace {

// "noun verb", or "noun" for a noun that is itself the command (predict).
std::string NameOf(const Verb& v) { return std::string(v.noun) + (v.name[0] ? std::string(" ") + v.name : ""); }

TEST(CommandsTest, TheTableHasEveryVerbOnceWithHelpAndAFunction) {
  std::set<std::string> nouns;
  for (const Noun& n : Nouns()) {
    EXPECT_TRUE(nouns.insert(n.name).second) << n.name;
    EXPECT_NE(std::string(n.help), "") << n.name;
  }
  std::vector<std::string> verbs;
  for (const Verb& v : Verbs()) {
    EXPECT_EQ(nouns.count(v.noun), 1u) << NameOf(v);
    EXPECT_NE(std::string(v.help), "") << NameOf(v);
    EXPECT_NE(v.declare, nullptr) << NameOf(v);
    verbs.push_back(NameOf(v));
  }
  // The CLI's surface: scripts and tests call these, so a change here is a change of contract.
  EXPECT_EQ(verbs, (std::vector<std::string>{"job submit", "job list", "job describe", "job watch", "job logs",
                                             "job cancel", "job delete", "job artifacts", "job metrics", "sweep submit", "sweep list",
                                             "sweep describe", "sweep cancel", "worker list", "worker cordon", "worker uncordon",
                                             "worker drain", "worker remove", "cluster status", "cache list", "cache stats",
                                             "cache evict", "predict"}));
}

// An app as main builds it.
struct App {
  CLI::App app;
  GlobalOptions options;
  std::vector<Command> commands;
  App() {
    app.require_subcommand(1);
    app.fallthrough();
    AddGlobalOptions(&app, &options);
    commands = AddCommands(&app);
  }
  // The chosen command's verb after parsing `line`; throws CLI::ParseError.
  const Verb* Parse(const std::string& line) {
    app.parse(line, false);
    const Command* c = Chosen(commands);
    return c ? c->verb : nullptr;
  }
};

TEST(CommandsTest, EachVerbIsChosenByItsNounAndName) {
  // The required positionals, where a verb has some.
  const std::map<std::string, std::string> args = {
      {"job submit", " job.yaml"},  {"job describe", " j1"},   {"job watch", " j1"},
      {"job logs", " j1"},          {"job cancel", " j1"},     {"job delete", " j1"},
      {"worker cordon", " w1"},
      {"sweep submit", " sweep.yaml"}, {"sweep describe", " s1"}, {"sweep cancel", " s1"},
      {"job artifacts", " j1"},     {"job metrics", " j1"},
      {"worker uncordon", " w1"},   {"worker drain", " w1"},   {"worker remove", " w1"},
      // Everything after `predict` is nightshift-predict's, its --help and -o included.
      {"predict", " --model d --jsonl x.jsonl -o json --help --bogus"},
  };
  ASSERT_EQ(App().commands.size(), Verbs().size());
  for (const Verb& v : Verbs()) {
    App a;
    auto it = args.find(NameOf(v));
    const Verb* chosen = a.Parse(NameOf(v) + (it == args.end() ? "" : it->second));
    ASSERT_NE(chosen, nullptr) << NameOf(v);
    EXPECT_EQ(chosen, &v) << NameOf(v);
  }
}

TEST(CommandsTest, VerbsTakeTheirFlagsAndGlobalOptionsOnEitherSide) {
  App a;
  EXPECT_EQ(NameOf(*a.Parse("-o json job logs j1 --rank 2 -f --coordinator h:1")), "job logs");
  EXPECT_EQ(a.options.output, "json");
  EXPECT_EQ(a.options.coordinator, "h:1");
  App b;
  EXPECT_EQ(NameOf(*b.Parse("cache evict --all --worker w2")), "cache evict");
  App c;
  EXPECT_EQ(NameOf(*c.Parse("job list --state RUNNING")), "job list");
}

TEST(CommandsTest, WhatIsNotInTheTableIsAUsageError) {
  for (const char* line : {"", "frob", "job", "job frob", "worker list extra", "job describe", "job submit",
                           "worker cordon", "job list --bogus", "-o xml job list", "job submit --wait"}) {
    App a;
    EXPECT_THROW(a.Parse(line), CLI::ParseError) << "'" << line << "'";
  }
}

TEST(CommandsTest, UsageErrorsExit2AndHelpExits0) {
  for (const char* line : {"", "frob", "job frob", "job describe", "job list --bogus", "-o xml job list"}) {
    App a;
    try {
      a.Parse(line);
      ADD_FAILURE() << "'" << line << "' parsed";
    } catch (const CLI::ParseError& e) {
      EXPECT_EQ(ExitCodeOf(e), kExitUsage) << "'" << line << "': CLI11 says " << e.get_exit_code();
    }
  }
  for (const char* line : {"--help", "-h", "job --help", "job submit --help"}) {
    App a;
    try {
      a.Parse(line);
      ADD_FAILURE() << "'" << line << "' parsed";
    } catch (const CLI::ParseError& e) {
      EXPECT_EQ(ExitCodeOf(e), kExitOk) << line;
    }
  }
}

TEST(CommandsTest, HelpListsEveryNounAndEachNounsVerbs) {
  App a;
  const std::string top = a.app.help();
  for (const Noun& n : Nouns()) {
    EXPECT_NE(top.find(n.name), std::string::npos) << n.name;
    EXPECT_NE(top.find(n.help), std::string::npos) << n.help;
  }
  for (const Verb& v : Verbs()) {
    const std::string noun_help = a.app.get_subcommand(v.noun)->help();
    EXPECT_NE(noun_help.find(v.name), std::string::npos) << NameOf(v);
    EXPECT_NE(noun_help.find(v.help), std::string::npos) << NameOf(v);
  }
}

}  // namespace
}  // namespace nightshift::cli
