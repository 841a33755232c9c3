// WorkerOptions: the one options struct of nightshift-worker. main.cc fills it from
// flags and checks it once at start-up; everything else receives it by const&.
#ifndef NIGHTSHIFT_WORKER_WORKER_OPTIONS_H_
#define NIGHTSHIFT_WORKER_WORKER_OPTIONS_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "nightshift/v1/cluster.pb.h"

namespace nightshift {

struct WorkerOptions {
  std::string coordinator;       // HOST:PORT of the coordinator
  std::string token;             // bearer token for the coordinator (role worker), from env
                                 // NIGHTSHIFT_TOKEN (read once, then wiped); empty: none
  std::string token_file;        // or a file holding it (--token-file; beats the environment)
  std::string run_as;            // root: the user jobs run as ("": nightshift-job, else nobody)
  std::string tls_ca;            // PEM CA of the coordinator's certificate; empty: plaintext
  std::string tls_cert, tls_key; // this worker's certificate and key (mutual TLS); optional
  // The file service's own certificate and key (TLS; required when tls_ca is set: a
  // cluster on TLS serves workers' files over TLS too). Peers are verified with tls_ca.
  std::string file_service_cert, file_service_key;
  // Where jobs may read data and model folders (resolved). Empty: nowhere, unless
  // allow_any_path (then anywhere this process can read; a warning at start).
  std::vector<std::string> data_roots;
  bool allow_any_path = false;
  std::string name;              // unique worker name
  std::string work_dir;          // data cache, job configs and rank logs
  std::string checkpoint_root;   // <root>/<job id>/ holds a job's checkpoints; default <work_dir>/checkpoints
  std::string advertise_host = "127.0.0.1";  // address other workers reach rank 0 on
  std::string trainer_path;      // default: nightshift-trainer beside this binary
  int cpu_slots = 1;             // ranks this worker runs at once (no GPUs)
  std::vector<v1::GpuInfo> gpus; // found at start (NVML); one slot each when present
  // Memory the ranks may use together, told the coordinator (--memory-gb; default
  // HostMemoryBytes()): the scheduler places a rank here only if resources.memory_gb
  // fits in memory_bytes / slots. 0: unknown, no check.
  int64_t memory_bytes = 0;
  int prep_threads = 2;          // threads for tokenization
  int64_t max_prep_bytes = int64_t{64} << 30;  // bytes data preparation reads for one job
                                               // (PrepOptions::max_input_bytes); 64 GiB
  int64_t cache_max_bytes = 0;   // feature cache budget; 0: none
  double stop_grace_seconds = 10;  // SIGTERM, then SIGKILL after this long
  int64_t log_max_bytes = 64 << 20;  // a rank log rotates past this size
  int log_keep = 3;                  // rotated rank logs kept (rank-R.log.1 .. .N)
  std::string log_listen = "127.0.0.1:0";  // WorkerFileService address (--log-listen; port 0: pick one)
  std::string log_address;       // where the coordinator reaches it (set once it listens)
  // Set (job_id non-empty): this worker lives inside a cluster allocation (--cluster
  // slurm; --allocation-job): it registers as serving that attempt of that job alone and
  // exits when the coordinator says `release`.
  v1::WorkerAllocation allocation;
};

// Where the worker's tasks checkpoint: --checkpoint-root, else <work_dir>/checkpoints
// (its own disk), as an absolute path.
inline std::string CheckpointRoot(const WorkerOptions& options) {
  return std::filesystem::absolute(options.checkpoint_root.empty() ? options.work_dir + "/checkpoints"
                                                                   : options.checkpoint_root)
      .lexically_normal()  // files are opened beneath it (io::OpenFileBeneath wants no "." or "..")
      .string();
}

// The work dir and the checkpoint root, every link resolved (as far as they exist): no
// job reads inside them (input_files.h's OutsideOwnFolders).
inline std::vector<std::string> OwnFolders(const WorkerOptions& options) {
  std::error_code ec;
  std::vector<std::string> own;
  for (const std::string& folder : {options.work_dir, CheckpointRoot(options)}) {
    const std::filesystem::path real = std::filesystem::weakly_canonical(std::filesystem::absolute(folder), ec);
    own.push_back(ec ? folder : real.string());
  }
  return own;
}

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_WORKER_OPTIONS_H_
