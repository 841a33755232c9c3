// What an assignment (a worker's part of one attempt of a job) resolves to on this
// worker: the options of its data preparation, the trainer's config file, each rank's
// environment and what of the worker's folders the trainer reaches. Pure functions (no
// I/O, no clock), but TrainerViewOf, which reads the config file.
#ifndef NIGHTSHIFT_WORKER_ASSIGNMENT_H_
#define NIGHTSHIFT_WORKER_ASSIGNMENT_H_

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nightshift/v1/cluster.pb.h"
#include "common/status.h"
#include "worker/confinement.h"
#include "worker/input_files.h"

namespace nightshift {

// The spec's data preparation. `roots`: the worker's --data-root folders (resolved).
PrepOptions PrepOptionsFor(const v1::JobSpec& spec, const std::vector<std::string>& roots);

// The trainer's config file (worker/trainer/config.h reads it): job_id, attempt, the
// spec as protobuf JSON (field names as in the .proto, defaults written out), `data`
// (what preparation resolved: meta.json plus the shard paths), checkpoint_dir and
// checkpoint_dir_shared (whether every worker sees that folder: a --checkpoint-root), and
// data_roots (the worker's, beneath which the trainer opens the user's model folders).
nlohmann::json TrainerConfig(const v1::Assignment& assignment, const nlohmann::json& data,
                             const std::string& checkpoint_dir, bool checkpoint_dir_shared,
                             const std::vector<std::string>& data_roots = {});

// What a trainer started with `config` (written at `config_path`) reads and writes of the
// worker's folders, which its confinement hides otherwise: read-only the config's folder
// (the attempt's), the folders of its shards and tokenizer (the feature-cache entry) and
// the model folders the spec names (pretrained, init_from, a TorchScript path: confined
// to the data roots already); writable its checkpoint_dir (exports go inside it); its
// mount points in <config's folder>/.view.
JobView TrainerView(const nlohmann::json& config, const std::string& config_path);
// The same, read from the config file (a rank, or an export of a finished job).
StatusOr<JobView> TrainerViewOf(const std::string& config_path);

// The torchrun-style environment of local rank `local_rank` (0-based on this worker):
// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (from
// `master`, HOST:PORT of rank 0), NIGHTSHIFT_JOB_ID, and with `gpus` (one index per local
// rank) CUDA_VISIBLE_DEVICES, so each rank sees only its own GPU, as cuda:0.
std::map<std::string, std::string> RankEnvironment(const v1::Assignment& assignment, int local_rank,
                                                   const std::string& master, const std::vector<int>& gpus);

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_ASSIGNMENT_H_
