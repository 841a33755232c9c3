#include "worker/assignment.h"

#include <google/protobuf/util/json_util.h>

#include <filesystem>
#include <fstream>

namespace nightshift {

PrepOptions PrepOptionsFor(const v1::JobSpec& spec, const std::vector<std::string>& roots) {
  const v1::DataSpec& d = spec.data();
  PrepOptions o;
  o.path = d.path();
  o.format = d.format();
  o.text_field = d.text_field();
  o.label_field = d.label_field();
  o.completion_field = d.completion_field();
  o.max_samples = d.max_samples();
  o.validation_fraction = d.validation_fraction();
  o.seed = spec.train().seed();
  o.vocab_size = d.tokenizer().vocab_size();
  o.max_len = spec.model().max_len();
  o.classifier = spec.model().arch() != "gpt_lm" && spec.model().task() != "causal_lm";
  // model.init_from: its tokenizer as it is (the task adds its digest from checksums.json)
  if (!spec.model().init_from().empty()) o.tokenizer_model = spec.model().init_from() + "/tokenizer.model";
  o.pretrained = spec.model().pretrained();
  o.roots = roots;
  return o;
}

nlohmann::json TrainerConfig(const v1::Assignment& assignment, const nlohmann::json& data,
                             const std::string& checkpoint_dir, bool checkpoint_dir_shared,
                             const std::vector<std::string>& data_roots) {
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(assignment.spec(), &spec_json, options);
  nlohmann::json config;
  config["job_id"] = assignment.task().job_id();
  config["attempt"] = assignment.task().attempt();
  config["spec"] = nlohmann::json::parse(spec_json);
  config["data"] = data;
  config["checkpoint_dir"] = checkpoint_dir;
  config["checkpoint_dir_shared"] = checkpoint_dir_shared;
  config["data_roots"] = data_roots;
  return config;
}

JobView TrainerView(const nlohmann::json& config, const std::string& config_path) {
  namespace fs = std::filesystem;
  const auto text = [](const nlohmann::json& object, const char* key) {
    const auto it = object.is_object() ? object.find(key) : object.end();
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const auto folder_of = [](const std::string& file) {
    return file.empty() ? file : fs::path(file).parent_path().string();
  };
  JobView view;
  view.read_only.push_back(folder_of(config_path));
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& data = config.contains("data") ? config["data"] : empty;
  for (const char* file : {"train_shard", "val_shard", "tokenizer_model"})
    view.read_only.push_back(folder_of(text(data, file)));
  const nlohmann::json& spec = config.contains("spec") ? config["spec"] : empty;
  const nlohmann::json& model = spec.is_object() && spec.contains("model") ? spec["model"] : empty;
  for (const char* folder : {"pretrained", "init_from"}) view.read_only.push_back(text(model, folder));
  view.read_only.push_back(folder_of(text(model, "path")));  // a TorchScript module: a file
  view.writable.push_back(text(config, "checkpoint_dir"));
  view.mounts = folder_of(config_path) + "/.view";
  return view;
}

StatusOr<JobView> TrainerViewOf(const std::string& config_path) {
  std::ifstream in(config_path);
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return Status::IOError("cannot read the trainer's config " + config_path);
  return TrainerView(config, config_path);
}

std::map<std::string, std::string> RankEnvironment(const v1::Assignment& a, int local_rank,
                                                   const std::string& master, const std::vector<int>& gpus) {
  const size_t colon = master.rfind(':');
  std::map<std::string, std::string> env = {
      {"RANK", std::to_string(a.first_rank() + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(a.world_size())},
      {"LOCAL_WORLD_SIZE", std::to_string(a.num_ranks())},
      {"MASTER_ADDR", master.substr(0, colon)},
      {"MASTER_PORT", colon == std::string::npos ? "" : master.substr(colon + 1)},
      {"NIGHTSHIFT_JOB_ID", a.task().job_id()}};
  if (local_rank < static_cast<int>(gpus.size())) {
    env["CUDA_VISIBLE_DEVICES"] = std::to_string(gpus[local_rank]);
    // The index is NVML's (gpu_inventory.h), which counts in PCI bus order; CUDA's own
    // default order (fastest first) can differ on a machine of mixed GPUs.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  }
  return env;
}

}  // namespace nightshift
