// coordinator/slurm.h: the sbatch command and script, squeue's JSON (recorded from Slurm
// 22.05's daemons, and 23.11's shape from its documentation: tests/coordinator/testdata/
// slurm/README.md), and SlurmCluster over a fake CommandRunner. The same against real
// Slurm daemons on test hosts: tests/e2e/slurm_test.cc.
#include "coordinator/slurm.h"

#include <gtest/gtest.h>

#include <map>

#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace nightshift {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/coordinator/testdata/slurm/" + name);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

AllocationRequest Request() {
  AllocationRequest r;
  r.job_id = "j-0c1f";
  r.attempt = 2;
  r.priority = 50;
  r.nodes = 2;
  r.gpus_per_node = 8;
  r.cpus_per_node = 64;
  r.memory_gb_per_node = 1.5;
  r.time_limit_minutes = 90;
  r.node_command = {"/opt/nightshift/bin/nightshift-worker", "--allocation", "j-0c1f/2", "--label", "it's \"quoted\" $HOME"};
  r.token = "allocation:j-0c1f:2:" + std::string(64, 'e');
  return r;
}

TEST(SlurmTest, TheJobNameCarriesTheJobAndTheAttempt) {
  EXPECT_EQ(SlurmJobName("j-0c1f", 2), "nightshift-j-0c1f-a2");
  std::string job;
  int attempt = -1;
  ASSERT_TRUE(ParseSlurmJobName("nightshift-j-a1-a12", &job, &attempt));
  EXPECT_EQ(job, "j-a1");
  EXPECT_EQ(attempt, 12);
  for (const char* other : {"bash", "nightshift-", "nightshift-j-1", "nightshift-j-a", "nightshift-j-ax", "other-j-a1"})
    EXPECT_FALSE(ParseSlurmJobName(other, &job, &attempt)) << other;
}

TEST(SlurmTest, SbatchAsksForTheNodesGpusAndLimitsWhereThePriorityTableSays) {
  SlurmOptions o;
  o.priorities = {{0, "batch", "", ""}, {100, "urgent", "high", "ml"}, {10, "normal", "standard", "ml"}};
  o.log_dir = "/var/log/nightshift";
  o.signal_before_end_seconds = 300;
  const std::vector<std::string> want = {
      "--parsable", "--job-name=nightshift-j-0c1f-a2", "--nodes=2", "--ntasks-per-node=1", "--no-requeue",
      "--signal=TERM@300", "--gres=gpu:8", "--cpus-per-task=64", "--mem=1536M", "--time=90",
      "--partition=normal", "--qos=standard", "--account=ml", "--output=/var/log/nightshift/slurm-%j.out"};
  EXPECT_EQ(SbatchArgs(Request(), o), want);
  AllocationRequest low = Request();
  low.priority = -5;  // below every row: Slurm's defaults
  low.gpus_per_node = low.cpus_per_node = 0;
  low.memory_gb_per_node = 0;
  low.time_limit_minutes = 0;
  o.log_dir.clear();
  EXPECT_EQ(SbatchArgs(low, o), (std::vector<std::string>{"--parsable", "--job-name=nightshift-j-0c1f-a2", "--nodes=2",
                                                           "--ntasks-per-node=1", "--no-requeue", "--signal=TERM@300"}));
  low.priority = 1000;
  EXPECT_EQ(SbatchArgs(low, o).back(), "--account=ml");
}

// The script run by a real shell, with an srun that prints what it was given: every word
// of the node command arrives as it was, quotes and dollars included.
TEST(SlurmTest, TheBatchScriptHandsSrunTheNodeCommandWordForWord) {
  const fs::path dir = fs::temp_directory_path() / ("nightshift_slurm_script_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream srun(dir / "srun");
    srun << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\nprintf 'token %s\\n' "
            "\"$NIGHTSHIFT_ALLOCATION_TOKEN\"\n";
  }
  fs::permissions(dir / "srun", fs::perms::owner_all);
  SubprocessRunner runner;
  StatusOr<CommandResult> r =
      runner.Run({"sh", "-s"}, SbatchScript(Request()), {{"PATH", dir.string() + ":/usr/bin:/bin"}}, 30);
  fs::remove_all(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(r->out,
            "--export=ALL\n--kill-on-bad-exit=1\n--ntasks-per-node=1\n/opt/nightshift/bin/nightshift-worker\n--allocation\n"
            "j-0c1f/2\n--label\nit's \"quoted\" $HOME\ntoken " + Request().token + "\n");  // in the environment only
}

TEST(SlurmTest, Squeue2205JsonParses) {
  StatusOr<std::vector<SlurmJob>> running = ParseSqueueJson(Fixture("squeue-22.05-running.json"));
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  ASSERT_FALSE(running->empty());
  bool found = false;
  for (const SlurmJob& j : *running) {
    if (j.name.rfind("nightshift-", 0) != 0 || j.state != SlurmState::kRunning) continue;
    found = true;
    EXPECT_FALSE(j.slurm_id.empty());
    EXPECT_EQ(j.slurm_state, "RUNNING");
    EXPECT_FALSE(j.nodes.empty());
    EXPECT_FALSE(j.partition.empty());
    EXPECT_EQ(j.user, "root");  // user_name: who submitted it (the fixture's runs were root's)
  }
  EXPECT_TRUE(found) << "a running job of ours in the fixture";
  StatusOr<std::vector<SlurmJob>> pending = ParseSqueueJson(Fixture("squeue-22.05-pending.json"));
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  found = false;
  for (const SlurmJob& j : *pending) {
    if (j.state != SlurmState::kPending) continue;
    found = true;
    EXPECT_FALSE(j.reason.empty());
    EXPECT_NE(j.reason, "None");
  }
  EXPECT_TRUE(found) << "a pending job in the fixture";
}

// Slurm 23.02 and later: states are lists, numbers {"set", "infinite", "number"}, the exit
// code an object (slurmrestd's v0.0.40 job schema, which squeue --json prints).
TEST(SlurmTest, Squeue2311JsonParses) {
  StatusOr<std::vector<SlurmJob>> jobs = ParseSqueueJson(Fixture("squeue-23.11-doc.json"));
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].slurm_id, "1041");
  EXPECT_EQ((*jobs)[0].state, SlurmState::kPending);
  EXPECT_EQ((*jobs)[0].reason, "Priority");
  EXPECT_EQ((*jobs)[1].state, SlurmState::kRunning);
  EXPECT_EQ((*jobs)[1].nodes, "gpu[01-02]");
  EXPECT_EQ((*jobs)[2].state, SlurmState::kNodeFail);
  EXPECT_EQ((*jobs)[2].exit_code, 128 + 9);
}

TEST(SlurmTest, SqueueOutputThatIsNotJobsIsAnError) {
  EXPECT_EQ(ParseSqueueJson("not json").status().code(), Status::kInvalidArgument);
  EXPECT_EQ(ParseSqueueJson("{\"meta\": {}}").status().code(), Status::kInvalidArgument);
  EXPECT_EQ(ParseSqueueJson("{\"jobs\": [{\"name\": \"x\"}]}").status().code(), Status::kInvalidArgument);
  const Status down = ParseSqueueJson(R"({"errors": [{"description": "Unable to contact slurm controller"}], "jobs": []})").status();
  EXPECT_EQ(down.code(), Status::kUnavailable);
  EXPECT_NE(down.message().find("Unable to contact slurm controller"), std::string::npos) << down.ToString();
  // 22.05's exit code is the wait status: exit 3, and killed by signal 15.
  StatusOr<std::vector<SlurmJob>> j = ParseSqueueJson(
      R"({"jobs": [{"job_id": 7, "name": "a", "job_state": "FAILED", "exit_code": 768},
                   {"job_id": 8, "name": "b", "job_state": "CANCELLED", "exit_code": 15},
                   {"job_id": 9, "name": "c", "job_state": "SOMETHING_NEW"}]})");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)[0].exit_code, 3);
  EXPECT_EQ((*j)[1].exit_code, 128 + 15);
  EXPECT_EQ((*j)[2].state, SlurmState::kUnknown);
  EXPECT_EQ((*j)[2].slurm_state, "SOMETHING_NEW");
}

// sacct --json from Slurm 22.05's slurmdbd (testdata/slurm/regenerate.py --sacct): one
// job per way an allocation ends. 22.05 writes every exit code as 0 (the failed job's
// script exited 7: sacct's text format says 7:0, sacct-22.05-text.txt), so its records
// say the exit code is not known.
TEST(SlurmTest, Sacct2205JsonParses) {
  const std::map<std::string, SlurmState> want = {
      {"completed", SlurmState::kCompleted}, {"failed", SlurmState::kFailed},
      {"cancelled", SlurmState::kCancelled}, {"preempted", SlurmState::kPreempted},
      {"timeout", SlurmState::kTimeout}};
  for (const auto& [name, state] : want) {
    SCOPED_TRACE(name);
    StatusOr<std::vector<SlurmJob>> jobs = ParseSacctJson(Fixture("sacct-22.05-" + name + ".json"));
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    ASSERT_EQ(jobs->size(), 1u);
    const SlurmJob& j = jobs->front();
    EXPECT_EQ(j.state, state);
    EXPECT_EQ(j.name.rfind("nightshift-j-acct-a", 0), 0u) << j.name;
    EXPECT_FALSE(j.nodes.empty());
    EXPECT_EQ(j.partition, "low");
    EXPECT_EQ(j.user, "root");  // sacct's user (a string; the association's is an object)
    EXPECT_FALSE(j.exit_code_known);
    EXPECT_GT(j.start_time, 0);
    EXPECT_GE(j.end_time, j.start_time);
  }
  StatusOr<std::vector<SlurmJob>> timeout = ParseSacctJson(Fixture("sacct-22.05-timeout.json"));
  ASSERT_TRUE(timeout.ok());
  EXPECT_EQ(timeout->front().time_limit_minutes, 1);
  EXPECT_GE(timeout->front().end_time - timeout->front().start_time, 60);
  StatusOr<std::vector<SlurmJob>> preempted = ParseSacctJson(Fixture("sacct-22.05-preempted.json"));
  ASSERT_TRUE(preempted.ok());
  EXPECT_EQ(preempted->front().nodes, "n[1-2]");
  StatusOr<std::vector<SlurmJob>> unknown = ParseSacctJson(Fixture("sacct-22.05-unknown.json"));
  ASSERT_TRUE(unknown.ok()) << unknown.status().ToString();
  EXPECT_TRUE(unknown->empty());
  EXPECT_FALSE(ParseSacctJson("sacct: error: Problem talking to the database").ok());
}

// 23.02 and later: states as lists, numbers as {"set", "infinite", "number"}, the signal's
// id one of those (the shape squeue-23.11-doc.json has); exit codes are true there.
TEST(SlurmTest, SacctJsonOfLaterSlurmsParses) {
  StatusOr<std::vector<SlurmJob>> jobs = ParseSacctJson(R"({"meta": {"plugin": {"type": "openapi/slurmdbd", "data_parser": "data_parser/v0.0.40"}},
      "jobs": [{"job_id": 51, "name": "nightshift-j-9-a1", "nodes": "gpu[01-02]", "partition": "batch",
                "state": {"current": ["FAILED"], "reason": "NonZeroExitCode"},
                "exit_code": {"status": ["EXITED"], "return_code": {"set": true, "infinite": false, "number": 7},
                              "signal": {"id": {"set": false, "infinite": false, "number": 0}, "name": ""}},
                "time": {"start": 1700000000, "end": 1700003480, "limit": {"set": true, "infinite": false, "number": 60}}},
               {"job_id": 52, "name": "nightshift-j-9-a2", "state": {"current": ["CANCELLED"]},
                "exit_code": {"status": ["SIGNALED"], "return_code": {"set": false, "infinite": false, "number": 0},
                              "signal": {"id": {"set": true, "infinite": false, "number": 15}, "name": "TERM"}}}]})");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].state, SlurmState::kFailed);
  EXPECT_TRUE((*jobs)[0].exit_code_known);
  EXPECT_EQ((*jobs)[0].exit_code, 7);
  EXPECT_EQ((*jobs)[0].reason, "NonZeroExitCode");
  EXPECT_EQ((*jobs)[0].time_limit_minutes, 60);
  EXPECT_EQ((*jobs)[0].end_time - (*jobs)[0].start_time, 3480);
  EXPECT_EQ((*jobs)[1].state, SlurmState::kCancelled);
  EXPECT_EQ((*jobs)[1].exit_code, 128 + 15);
}

// Records what it was asked to run and answers from a script.
class FakeRunner : public CommandRunner {
 public:
  StatusOr<CommandResult> Run(const std::vector<std::string>& argv, const std::string& input,
                              const std::map<std::string, std::string>& env, double) override {
    calls.push_back(argv);
    inputs.push_back(input);
    envs.push_back(env);
    if (answers.empty()) return Status::Internal("no answer");
    StatusOr<CommandResult> a = answers.front();
    answers.erase(answers.begin());
    return a;
  }
  std::vector<std::vector<std::string>> calls;
  std::vector<std::string> inputs;
  std::vector<std::map<std::string, std::string>> envs;
  std::vector<StatusOr<CommandResult>> answers;
};

// A coordinator whose uid has no user name cannot tell its allocations from other users'
// (squeue names users by name): it refuses to start on Slurm. A uid with a name passes.
TEST(SlurmTest, ACoordinatorWithoutAUserNameRefusesSlurm) {
  EXPECT_TRUE(SlurmCluster::CheckUserName().ok());  // this test's user (root in CI) has one
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become a uid without a passwd entry";
  const uid_t nameless = 54321;
  ASSERT_EQ(::getpwuid(nameless), nullptr) << "uid " << nameless << " has a passwd entry here";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // only async-signal-safe-ish work, then _exit
    ::close(fds[0]);
    if (::setresuid(nameless, nameless, nameless) != 0) ::_exit(2);
    const Status s = SlurmCluster::CheckUserName();
    const std::string m = s.message();
    if (::write(fds[1], m.data(), m.size()) < 0) ::_exit(2);
    ::_exit(s.code() == Status::kFailedPrecondition ? 0 : 1);
  }
  ::close(fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) message.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << message;
  EXPECT_NE(message.find("uid 54321 has no user name"), std::string::npos) << message;
}

TEST(SlurmTest, TheClusterSubmitsCancelsAndPollsItsOwnJobsOnly) {
  FakeRunner fake;
  SlurmOptions o;
  o.sbatch = "/usr/bin/sbatch";
  o.env = {{"SLURM_CONF", "/etc/slurm/test.conf"}};
  SlurmCluster cluster(o, &fake);
  fake.answers = {CommandResult{0, "4242;main\n", ""}, CommandResult{1, "", "sbatch: error: Batch job submission failed: Invalid qos specification\n"},
                  Status::NotFound("command `squeue` could not be run"),
                  CommandResult{0, R"({"jobs": [{"job_id": 4242, "name": "nightshift-j-0c1f-a2", "job_state": "PENDING", "state_reason": "Resources"},
                                                {"job_id": 17, "name": "someone-elses", "job_state": "RUNNING"}]})", ""},
                  CommandResult{1, "", "scancel: error: Kill job error on job id 4242: Invalid job id specified\n"},
                  CommandResult{1, "", "scancel: error: Unable to contact slurm controller\n"}};
  StatusOr<std::string> id = cluster.Submit(Request());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "4242");
  EXPECT_EQ(fake.calls[0][0], "/usr/bin/sbatch");
  EXPECT_EQ(fake.inputs[0], SbatchScript(Request()));
  EXPECT_EQ(fake.envs[0].at("SLURM_CONF"), "/etc/slurm/test.conf");
  const Status refused = cluster.Submit(Request()).status();
  EXPECT_EQ(refused.code(), Status::kInvalidArgument);  // never runs: the job's error, not a retry
  EXPECT_NE(refused.message().find("Invalid qos specification"), std::string::npos) << refused.ToString();
  EXPECT_EQ(cluster.Poll().status().code(), Status::kUnavailable);
  StatusOr<std::map<std::string, SlurmJob>> jobs = cluster.Poll();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(jobs->at("4242").reason, "Resources");
  EXPECT_EQ(fake.calls[3], (std::vector<std::string>{"squeue", "--json", "--all"}));
  EXPECT_TRUE(cluster.Cancel("4242").ok());  // already gone
  EXPECT_EQ(cluster.Cancel("4242").code(), Status::kUnavailable);
  EXPECT_EQ(fake.calls[5], (std::vector<std::string>{"scancel", "4242"}));
  // A time limit no longer than --signal's warning (120 s by default): every attempt would
  // be told to stop at once. Refused naming the field, before sbatch runs.
  AllocationRequest short_limit = Request();
  short_limit.time_limit_minutes = 2;
  const Status too_short = cluster.Submit(short_limit).status();
  EXPECT_EQ(too_short.code(), Status::kInvalidArgument);
  EXPECT_EQ(too_short.message().rfind("resources.time_limit_minutes: 2 ", 0), 0u) << too_short.ToString();
  EXPECT_EQ(fake.calls.size(), 6u);
}

// NODE_FAIL: squeue names every node of the job; which of them failed is sinfo's to say.
TEST(SlurmTest, ANodeFailureNamesTheNodesSlurmHasDown) {
  FakeRunner fake;
  SlurmCluster cluster(SlurmOptions{}, &fake);
  fake.answers = {CommandResult{0, R"({"jobs": [{"job_id": 9, "name": "nightshift-j-1-a0", "job_state": "NODE_FAIL", "nodes": "n[1-2]"},
                                                {"job_id": 10, "name": "nightshift-j-2-a0", "job_state": "RUNNING", "nodes": "n3", "user_name": "bob"}]})", ""},
                  CommandResult{0, "n2\n", ""}};
  StatusOr<std::vector<Allocation>> listed = cluster.List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  const Allocation& failed = (*listed)[0].id == "9" ? (*listed)[0] : (*listed)[1];
  const Allocation& running = (*listed)[0].id == "9" ? (*listed)[1] : (*listed)[0];
  EXPECT_EQ(failed.end, Allocation::End::kNodeFail);
  EXPECT_EQ(failed.phase, Allocation::Phase::kEnded);
  EXPECT_EQ(failed.failed_nodes, "n2");
  EXPECT_EQ(failed.job_id, "j-1");
  EXPECT_EQ(running.phase, Allocation::Phase::kRunning);
  EXPECT_EQ(running.user, "bob");  // whose it is: the provisioner's to judge
  EXPECT_EQ(failed.user, "");
  ASSERT_EQ(fake.calls.size(), 2u);  // sinfo only for the failed one
  EXPECT_EQ(fake.calls[1], (std::vector<std::string>{"sinfo", "--noheader", "--nodes=n[1-2]",
                                                     "--states=down,drain,fail,no_respond", "--format=%N"}));
}

// resources.time_limit_minutes: the limit's warning (--signal, 120 s before it by default)
// stops the worker, which exits 143 once its ranks checkpointed, so Slurm ends the job
// FAILED 143 at about the limit less the warning: that is the time limit, as TIMEOUT is
// (a command that ignores the warning). 143 early in the slice is not (a preemption's or
// an operator's SIGTERM; the provisioner takes it as the cluster's stop). A job still
// COMPLETING (23.02+ lists the flag after the state) has not ended.
TEST(SlurmTest, TheTimeLimitsWarningOrTimeoutEndsAnAllocationAsItsTimeLimit) {
  FakeRunner fake;
  SlurmCluster cluster(SlurmOptions{}, &fake);
  const int status143 = 143 << 8;  // 22.05's exit_code: the wait status
  fake.answers = {CommandResult{0, R"({"jobs": [
      {"job_id": 11, "name": "nightshift-j-1-a0", "job_state": "FAILED", "exit_code": )" + std::to_string(status143) +
                                       R"(, "start_time": 1000, "end_time": 4480, "time_limit": 60},
      {"job_id": 12, "name": "nightshift-j-2-a0", "job_state": "FAILED", "exit_code": )" + std::to_string(status143) +
                                       R"(, "start_time": 1000, "end_time": 3000, "time_limit": 60},
      {"job_id": 13, "name": "nightshift-j-3-a0", "job_state": ["TIMEOUT", "COMPLETING"],
       "time_limit": {"set": true, "infinite": false, "number": 60}},
      {"job_id": 14, "name": "nightshift-j-4-a0", "job_state": ["TIMEOUT"],
       "exit_code": {"return_code": {"set": true, "infinite": false, "number": 0}}}]})",
                                  ""}};
  StatusOr<std::vector<Allocation>> listed = cluster.List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::map<std::string, Allocation> by_id;
  for (const Allocation& a : *listed) by_id[a.id] = a;
  ASSERT_EQ(by_id.size(), 4u);
  EXPECT_EQ(by_id["11"].phase, Allocation::Phase::kEnded);
  EXPECT_EQ(by_id["11"].end, Allocation::End::kTimeLimit);  // 3,480 s: the 60 minutes less the 120 s warning
  EXPECT_EQ(by_id["12"].phase, Allocation::Phase::kEnded);
  EXPECT_EQ(by_id["12"].end, Allocation::End::kDone);       // 2,000 s into a 60-minute slice
  EXPECT_EQ(by_id["12"].exit_code, 143);
  EXPECT_EQ(by_id["13"].phase, Allocation::Phase::kRunning);  // its processes still stopping
  EXPECT_EQ(by_id["14"].end, Allocation::End::kTimeLimit);
}

// An allocation that left squeue: sacct's record says how it ended, mapped as squeue's
// are (on 22.05 with the exit code from the text format); without accounting, or without a
// record of it, NOT_FOUND; sacct timing out, cut short, or without the exit code yet,
// UNAVAILABLE (waited for: a preemption's record may come).
TEST(SlurmTest, AnAllocationThatLeftSqueueIsLookedUpInTheAccounting) {
  FakeRunner fake;
  SlurmCluster cluster(SlurmOptions{}, &fake);
  fake.answers = {CommandResult{0, Fixture("sacct-22.05-failed.json"), ""}, CommandResult{0, "7:0\n", ""},
                  CommandResult{0, Fixture("sacct-22.05-preempted.json"), ""}, CommandResult{0, "0:0\n", ""},
                  CommandResult{1, "", "sacct: error: Slurm accounting storage is disabled\n"},
                  CommandResult{0, Fixture("sacct-22.05-unknown.json"), ""}};
  StatusOr<Allocation> failed = cluster.Lookup("3");
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_EQ(failed->phase, Allocation::Phase::kEnded);
  EXPECT_EQ(failed->end, Allocation::End::kDone);
  EXPECT_EQ(failed->exit_code, 7);
  EXPECT_EQ(failed->job_id, "j-acct");
  EXPECT_EQ(failed->attempt, 2);
  EXPECT_EQ(fake.calls[0], (std::vector<std::string>{"sacct", "--json", "--jobs=3"}));
  EXPECT_EQ(fake.calls[1], (std::vector<std::string>{"sacct", "--noheader", "--allocations", "--parsable2",
                                                     "--format=ExitCode", "--jobs=3"}));
  StatusOr<Allocation> preempted = cluster.Lookup("5");
  ASSERT_TRUE(preempted.ok()) << preempted.status().ToString();
  EXPECT_EQ(preempted->end, Allocation::End::kPreempted);
  EXPECT_EQ(preempted->nodes, "n[1-2]");
  EXPECT_EQ(cluster.Lookup("5").status().code(), Status::kNotFound);  // accounting disabled
  EXPECT_EQ(cluster.Lookup("999999").status().code(), Status::kNotFound);
  EXPECT_EQ(fake.calls.size(), 6u);
  fake.answers = {Status::DeadlineExceeded("command `sacct --json --jobs=5` ran past 30 s"),
                  CommandResult{0, "{\"jobs\": [{\"job_id\"", ""},
                  CommandResult{0, Fixture("sacct-22.05-preempted.json"), ""},
                  CommandResult{1, "", "sacct: error: Problem talking to the database\n"},
                  Status::NotFound("command `sacct` could not be run (not installed, or not in PATH)")};
  EXPECT_EQ(cluster.Lookup("5").status().code(), Status::kUnavailable);  // timed out
  EXPECT_EQ(cluster.Lookup("5").status().code(), Status::kUnavailable);  // cut short
  EXPECT_EQ(cluster.Lookup("5").status().code(), Status::kUnavailable);  // no exit code yet
  EXPECT_EQ(cluster.Lookup("5").status().code(), Status::kNotFound);     // no sacct at all
}

// --slurm-submit-as-owner: sbatch runs as the job's owner through sudo, with the
// cluster's SLURM_CONF kept; an owner that is not a Unix user name, root or the
// coordinator's own user is refused before anything runs; a job without an owner goes as
// the coordinator's user.
TEST(SlurmTest, AnAllocationIsSubmittedAsItsOwnerThroughSudo) {
  FakeRunner fake;
  SlurmOptions o;
  o.submit_as_owner = true;
  o.sudo = "/usr/bin/sudo";
  SlurmCluster cluster(o, &fake);
  fake.answers = {CommandResult{0, "7\n", ""}, CommandResult{0, "8\n", ""}};
  AllocationRequest r = Request();
  r.owner = "alice";
  ASSERT_TRUE(cluster.Submit(r).ok());
  std::vector<std::string> want = {"/usr/bin/sudo", "-n", "-u", "alice", "--preserve-env=SLURM_CONF", "--", "sbatch"};
  for (const std::string& a : SbatchArgs(r, o)) want.push_back(a);
  EXPECT_EQ(fake.calls[0], want);
  for (const char* bad : {"-rf", "Alice", "al ice", "root;id"}) {
    r.owner = bad;
    const Status refused = cluster.Submit(r).status();
    EXPECT_EQ(refused.code(), Status::kInvalidArgument) << bad;
    EXPECT_NE(refused.message().find("is not a Unix user name"), std::string::npos) << refused.ToString();
  }
  const std::string self = getpwuid(geteuid())->pw_name;
  for (const std::string& privileged : {std::string("root"), self}) {  // would read the coordinator's secret
    r.owner = privileged;
    const Status refused = cluster.Submit(r).status();
    EXPECT_EQ(refused.code(), Status::kInvalidArgument) << privileged;
    EXPECT_NE(refused.message().find("no job is submitted as them"), std::string::npos) << refused.ToString();
  }
  EXPECT_EQ(fake.calls.size(), 1u);  // none of those ran
  r.owner = "";
  ASSERT_TRUE(cluster.Submit(r).ok());
  EXPECT_EQ(fake.calls[1][0], "sbatch");
  // What List's allocations must run as to be ours (provisioner.h): the owner, else us.
  EXPECT_EQ(cluster.RunsAs("alice"), "alice");
  EXPECT_EQ(cluster.RunsAs(""), self);
  EXPECT_EQ(SlurmCluster(SlurmOptions(), &fake).RunsAs("alice"), self);
}

}  // namespace
}  // namespace nightshift
