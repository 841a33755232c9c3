// nightshift-prepare: data preparation in its own process (see worker/data_prep.h for
// why). Started by the worker, which owns the cache; builds into --output-dir and prints
// one progress line: {"event":"prepared","seconds":...,"input_bytes":...} or
// {"event":"error","message":...}.
// Exit codes: 0 done; 2 the data or options are wrong (a user error, not retried);
// 1 anything else.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "common/format/progress.h"
#include "worker/data_prep.h"

int main(int argc, char** argv) {
  using namespace nightshift;
  CLI::App app{"Prepare a job's data: tokenizer and token shards"};
  PrepareCommand command;
  AddPrepareFlags(&app, &command);
  CLI11_PARSE(app, argc, argv);

  const char* fd_env = std::getenv("NIGHTSHIFT_PROGRESS_FD");
  const int fd = fd_env ? std::atoi(fd_env) : 1;
  format::ProgressRecord r;
  auto data = PrepareData(command.options, command.output_dir, command.threads);
  int code = 0;
  if (data.ok()) {
    r.event = "prepared";
    r.numbers["seconds"] = data->seconds;
    r.numbers["input_bytes"] = static_cast<double>(data->input_bytes);
    r.numbers["train_samples"] = static_cast<double>(data->train_samples);
    r.numbers["read_seconds"] = data->read_seconds;
    r.numbers["tokenizer_seconds"] = data->tokenizer_seconds;
    r.numbers["tokenize_seconds"] = data->tokenize_seconds;
  } else {
    r.event = "error";
    r.strings["message"] = data.status().message();
    const bool user = data.status().code() == Status::kNotFound ||
                      data.status().code() == Status::kInvalidArgument;
    code = user ? 2 : 1;
    std::fprintf(stderr, "nightshift-prepare: %s\n", data.status().ToString().c_str());
  }
  std::string line = format::FormatProgressLine(r) + "\n";
  (void)!::write(fd, line.data(), line.size());
  return code;
}
