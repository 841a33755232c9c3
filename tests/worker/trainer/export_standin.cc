// TEST-ONLY stand-in for the export reader (worker/trainer/export.h) until export.cc is
// in nightshift_trainer_lib: enough to run nightshift-predict-standin on folders that the
// predictor tests write (F32 safetensors, checksums by size only, transformer_classifier
// names and gpt_lm's GPT-2 names). worker/trainer/CMakeLists.txt links it only when the
// real export.cc is absent; never part of nightshift-predict.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "worker/trainer/export.h"

namespace nightshift::trainer {

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Our names -> GPT-2's, and whether the tensor is a Conv1D weight (transposed).
std::pair<std::string, bool> Gpt2Name(const std::string& ours) {
  if (ours == "tok_emb.weight") return {"transformer.wte.weight", false};
  if (ours == "pos_emb.weight") return {"transformer.wpe.weight", false};
  if (ours.rfind("ln_f.", 0) == 0) return {"transformer." + ours, false};
  if (ours == "head.weight") return {"", false};  // tied to wte
  // blocks.N.x.y
  const size_t a = ours.find('.', 7), b = ours.rfind('.');
  const std::string n = ours.substr(7, a - 7), mod = ours.substr(a + 1, b - a - 1), leaf = ours.substr(b + 1);
  static const std::map<std::string, std::string> names = {{"ln1", "ln_1"}, {"qkv", "attn.c_attn"},
                                                           {"proj", "attn.c_proj"}, {"ln2", "ln_2"},
                                                           {"fc1", "mlp.c_fc"}, {"fc2", "mlp.c_proj"}};
  return {"transformer.h." + n + "." + names.at(mod) + "." + leaf, leaf == "weight" && mod.rfind("ln", 0) != 0};
}

}  // namespace

std::map<std::string, torch::Tensor> ReadSafetensors(const std::string& path) {
  const std::string bytes = Slurp(path);
  if (bytes.size() < 8) throw std::runtime_error(path + ": too short for safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (8 + n > bytes.size()) throw std::runtime_error(path + ": header past the end");
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    if (v.at("dtype") != "F32") throw std::runtime_error(path + ": " + name + " is not F32");
    std::vector<int64_t> shape = v.at("shape").get<std::vector<int64_t>>();
    auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
    auto t = torch::empty(shape, torch::kFloat);
    if (off[1] - off[0] != static_cast<uint64_t>(t.numel()) * 4) throw std::runtime_error(path + ": bad size " + name);
    std::memcpy(t.data_ptr<float>(), bytes.data() + 8 + n + off[0], off[1] - off[0]);
    out[name] = t;
  }
  return out;
}

std::string VerifyModelFolder(const std::string& dir) {
  try {
    auto sums = nlohmann::json::parse(Slurp(dir + "/checksums.json"));
    for (auto& [name, v] : sums.at("files").items()) {
      std::error_code ec;
      auto size = std::filesystem::file_size(dir + "/" + name, ec);
      if (ec || size != v.at("bytes").get<uint64_t>()) return name + " does not match checksums.json";
    }
  } catch (const std::exception& e) {
    return std::string("checksums.json: ") + e.what();
  }
  return "";
}

void LoadExportTensors(const std::string& arch, const std::map<std::string, torch::Tensor>& tensors,
                       SequenceModel& model) {
  torch::NoGradGuard no_grad;
  size_t used = 0;
  for (auto& p : model.named_parameters()) {
    std::string name = p.key();
    bool transpose = false;
    if (arch == "gpt_lm") {
      auto [theirs, t] = Gpt2Name(p.key());
      if (theirs.empty()) theirs = "transformer.wte.weight";
      else ++used;
      name = theirs;
      transpose = t;
    } else {
      ++used;
    }
    auto it = tensors.find(name);
    if (it == tensors.end()) throw std::runtime_error("model.safetensors: missing " + name);
    auto src = transpose ? it->second.t() : it->second;
    if (src.sizes() != p.value().sizes()) throw std::runtime_error("model.safetensors: mis-shaped " + name);
    p.value().copy_(src);
  }
  if (used != tensors.size()) throw std::runtime_error("model.safetensors: extra tensors");
}

std::map<std::string, torch::Tensor> ExportTensors(const std::string&, SequenceModel&) {
  throw std::runtime_error("export stand-in: ExportTensors is not implemented");
}
std::string SafetensorsBytes(const std::map<std::string, torch::Tensor>&) {
  throw std::runtime_error("export stand-in: SafetensorsBytes is not implemented");
}
void ExportModel(const std::string&, const TrainConfig&, SequenceModel&, const ExportInfo&) {
  throw std::runtime_error("export stand-in: ExportModel is not implemented");
}

}  // namespace nightshift::trainer
