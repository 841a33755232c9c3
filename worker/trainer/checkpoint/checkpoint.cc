#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/checkpoint/optimizer_shards.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/io/atomic_file.h"
#include "common/format/checkpoint_layout.h"
#include "common/format/checkpoint_manifest.h"
#include "common/format/shard.h"

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Whether some parameter of `model` is frozen (an adapter's base model).
bool HasFrozen(torch::nn::Module& model) {
  for (const auto& p : model.parameters())
    if (!p.requires_grad()) return true;
  return false;
}

bool HasTrainable(torch::nn::Module& module) {
  for (const auto& p : module.parameters())
    if (p.requires_grad()) return true;
  return false;
}

// model.pt: the parameters and buffers of `module` nested as Module::save nests them (one
// archive per child module), with `trainable_only` (a frozen base, which comes from its
// folder again) only the trainable parameters, and never those in `skip` (their values
// are in the optimizer's shard files). False when nothing was written.
bool SaveModel(torch::nn::Module& module, torch::serialize::OutputArchive& archive, bool trainable_only,
               const std::set<const c10::TensorImpl*>& skip) {
  bool any = false;
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    if ((trainable_only && !p.value().requires_grad()) || skip.count(p.value().unsafeGetTensorImpl())) continue;
    archive.write(p.key(), p.value());
    any = true;
  }
  if (!trainable_only)
    for (const auto& b : module.named_buffers(/*recurse=*/false)) {
      archive.write(b.key(), b.value(), /*is_buffer=*/true);
      any = true;
    }
  for (const auto& child : module.named_children()) {
    torch::serialize::OutputArchive sub(archive.compilation_unit());
    if (SaveModel(*child.value(), sub, trainable_only, skip) || !trainable_only) {
      archive.write(child.key(), sub);
      any = true;
    }
  }
  return any;
}

// SaveModel's (and Module::save's) inverse: the parameters the archive lacks are listed in
// *missing with their names; a missing buffer throws (c10::Error) naming it. The `freed`
// parameters are neither written nor listed (their values are in the shard files, which
// LoadShards reads); an archive holding one throws WholeParametersNeeded.
void LoadModel(torch::nn::Module& module, torch::serialize::InputArchive& archive, bool trainable_only,
               const std::string& prefix, std::vector<std::pair<std::string, torch::Tensor>>* missing,
               const std::set<const c10::TensorImpl*>& freed) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters(/*recurse=*/false)) {
    if (trainable_only && !p.value().requires_grad()) continue;
    if (freed.count(p.value().unsafeGetTensorImpl()) != 0) {
      if (torch::Tensor whole; archive.try_read(p.key(), whole))  // read aside: p stays as it is
        throw WholeParametersNeeded("checkpoint: model.pt holds " + prefix + p.key() +
                                    ", which this run holds in shards (written without sharding full)");
    } else if (!archive.try_read(p.key(), p.value())) {
      missing->emplace_back(prefix + p.key(), p.value());
    }
  }
  if (!trainable_only)
    for (auto& b : module.named_buffers(/*recurse=*/false)) archive.read(b.key(), b.value(), /*is_buffer=*/true);
  for (const auto& child : module.named_children()) {
    if (trainable_only && !HasTrainable(*child.value())) continue;
    torch::serialize::InputArchive sub;
    if (archive.try_read(child.key(), sub)) {
      LoadModel(*child.value(), sub, trainable_only, prefix + child.key() + ".", missing, freed);
      continue;
    }
    for (auto& p : child.value()->named_parameters())
      if ((!trainable_only || p.value().requires_grad()) && freed.count(p.value().unsafeGetTensorImpl()) == 0)
        missing->emplace_back(prefix + child.key() + "." + p.key(), p.value());
  }
}

constexpr const char* kComplete = format::kCheckpointComplete;
const std::string kStaging = ".staging-";  // + step-00000123.attempt4: FreshStagingDir
constexpr char kFence[] = "FENCE";

void Check(const std::string& err) {
  if (!err.empty()) throw std::runtime_error("checkpoint: " + err);
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("checkpoint: cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

using format::StepDirName;

std::string Hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) { out.push_back(d[c >> 4]); out.push_back(d[c & 15]); }
  return out;
}

// `field`: the manifest's, named in the error.
std::string Unhex(const std::string& hex, const std::string& field = "rng_cpu") {
  auto v = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::runtime_error("checkpoint: bad hex in manifest " + field);
  };
  if (hex.size() % 2) throw std::runtime_error("checkpoint: bad hex in manifest " + field);
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) out.push_back(static_cast<char>(v(hex[i]) * 16 + v(hex[i + 1])));
  return out;
}

json PositionToJson(const RunPosition& p) {
  return {{"step", p.step},
          {"epoch", p.epoch},
          {"batch_in_epoch", p.batch_in_epoch},
          {"world_size", p.world_size},
          {"lr_scale", p.lr_scale},
          {"lr_steps", p.lr_steps},
          {"grad_scale", p.scaler.scale},
          {"grad_scale_growth_tracker", p.scaler.growth_tracker},
          {"nan_consecutive", p.nan_guard.consecutive},
          {"nan_rollbacks", p.nan_guard.rollbacks},
          {"max_tokens", p.max_tokens},
          {"accumulate_gradients", p.accumulate_gradients},
          {"micro_batch_tokens", p.micro_batch_tokens},
          {"train_seconds", p.train_seconds},
          {"tokens_seen", p.tokens_seen},
          {"rng_cpu", Hex(p.rng_cpu)},
          {"rng_device", Hex(p.rng_device)},
          {"best_step", p.best_step},
          {"best_metric", p.best_metric},
          {"evaluated_step", p.evaluated_step},
          {"has_stop_best", p.has_stop_best},
          {"stop_best", p.stop_best},
          {"evals_without_improvement", p.evals_without_improvement}};
}

// Version 2: the "position" object. Throws json::exception on a missing or mistyped field.
RunPosition PositionFromJson(const json& j) {
  RunPosition p;
  p.step = j.at("step").get<int64_t>();
  p.epoch = j.at("epoch").get<int64_t>();
  p.batch_in_epoch = j.at("batch_in_epoch").get<int64_t>();
  p.lr_scale = j.at("lr_scale").get<double>();
  p.scaler.scale = j.at("grad_scale").get<double>();
  p.scaler.growth_tracker = j.at("grad_scale_growth_tracker").get<int64_t>();
  p.max_tokens = j.at("max_tokens").get<int64_t>();
  p.train_seconds = j.at("train_seconds").get<double>();
  p.tokens_seen = j.at("tokens_seen").get<int64_t>();
  p.rng_cpu = Unhex(j.at("rng_cpu").get<std::string>());
  // Absent before 2026-12-07: the device's dropout draws from its seed's start again.
  p.rng_device = Unhex(j.value("rng_device", std::string()), "rng_device");
  // Absent in checkpoints written before export.best and early stopping.
  p.best_step = j.value("best_step", int64_t{-1});
  p.world_size = j.value("world_size", int64_t{0});  // absent before sharding (issue 43)
  p.accumulate_gradients = j.value("accumulate_gradients", std::string());  // absent before it
  p.micro_batch_tokens = j.value("micro_batch_tokens", std::vector<int64_t>());  // absent before 2026-12-07
  p.best_metric = j.value("best_metric", 0.0);
  // Absent before 2026-12-07: taken as evaluated (as those runs went on).
  p.evaluated_step = j.value("evaluated_step", p.step);
  p.lr_steps = j.value("lr_steps", p.step);  // the same: the rate was the step's
  p.has_stop_best = j.value("has_stop_best", false);
  p.stop_best = j.value("stop_best", 0.0);
  p.evals_without_improvement = j.value("evals_without_improvement", int64_t{0});
  // Absent before 2026-12-07: a streak not counted; a roll-back said by the halved rate
  // (only RollBack halves lr_scale).
  p.nan_guard.consecutive = j.value("nan_consecutive", 0);
  p.nan_guard.rollbacks = j.value("nan_rollbacks", p.lr_scale < 1.0 ? 1 : 0);
  return p;
}

// Version 1: the position at the top level, the rest in a "metrics" map of doubles
// (each key absent in checkpoints older than it: the defaults then).
RunPosition PositionFromVersion1(const json& m) {
  RunPosition p;
  p.step = m.at("step").get<int64_t>();
  p.epoch = m.at("epoch").get<int64_t>();
  p.batch_in_epoch = m.at("batch_in_epoch").get<int64_t>();
  p.rng_cpu = Unhex(m.at("rng_cpu").get<std::string>());
  const json metrics = m.value("metrics", json::object());
  p.lr_scale = metrics.value("lr_scale", p.lr_scale);
  p.scaler.scale = metrics.value("grad_scale", p.scaler.scale);
  p.scaler.growth_tracker = static_cast<int64_t>(metrics.value("grad_scale_growth_tracker", 0.0));
  p.max_tokens = static_cast<int64_t>(metrics.value("max_tokens", 0.0));
  p.train_seconds = metrics.value("train_seconds", 0.0);
  p.tokens_seen = static_cast<int64_t>(metrics.value("tokens_seen", 0.0));
  p.nan_guard.rollbacks = p.lr_scale < 1.0 ? 1 : 0;  // only a roll-back halves the rate
  p.lr_steps = p.evaluated_step = p.step;
  return p;
}

void RemoveCheckpoint(const fs::path& dir) { format::RemoveCheckpoint(dir.string()); }

}  // namespace

CheckpointManager::CheckpointManager(CheckpointOptions options)
    : options_(std::move(options)), last_save_(std::chrono::steady_clock::now()) {}

bool CheckpointManager::Due(int64_t step) const {
  if (options_.every_steps > 0 && step % options_.every_steps == 0) return true;
  return options_.every_seconds > 0 &&
         std::chrono::steady_clock::now() - last_save_ >= std::chrono::seconds(options_.every_seconds);
}

namespace {

// The files of one checkpoint as they are written: each streamed to a temporary name and
// renamed (io::AtomicFileWriter), its size and checksums recorded for the manifest as the
// bytes go by, never whole in memory (the optimizer's state is twice the model, and a copy
// of it would be the trainer's peak: issue 30's RSS target). A sharded optimizer's ranks
// stream their shards into it too (ShardSink).
class CheckpointFiles : public ShardedOptimizerState::ShardSink {
 public:
  explicit CheckpointFiles(fs::path dir) : dir_(std::move(dir)) {}

  void Open(const std::string& file) override {
    name_ = file;
    out_ = std::make_unique<io::AtomicFileWriter>((dir_ / file).string());
    hasher_ = format::FileHasher();
    err_.clear();
  }
  void Append(const char* data, size_t n) override {
    if (err_.empty()) err_ = out_->Append(data, n);  // a failed write is reported by Close, naming the file
    hasher_.Update(data, n);
  }
  void Close() override {
    Check(err_.empty() ? out_->Commit() : err_);
    manifest_.files[name_] = hasher_.Entry();
    bytes_ += static_cast<int64_t>(manifest_.files[name_].bytes);
  }
  void Stream(const std::string& file, torch::serialize::OutputArchive& archive) {
    Open(file);
    archive.save_to([&](const void* data, size_t n) -> size_t {
      Append(static_cast<const char*>(data), n);
      return n;
    });
    Close();
  }

  format::CheckpointManifest& manifest() { return manifest_; }  // every file's size and checksum
  int64_t bytes() const { return bytes_; }

 private:
  const fs::path dir_;
  format::CheckpointManifest manifest_;
  int64_t bytes_ = 0;
  std::string name_, err_;
  std::unique_ptr<io::AtomicFileWriter> out_;
  format::FileHasher hasher_;
};

// Where a save or an install of `step` by `attempt` writes before it commits: a folder of
// the attempt's own beside the step's (a name that is no step's), made empty.
fs::path FreshStagingDir(const std::string& root, int64_t step, int attempt) {
  const fs::path dir = fs::path(root) / (kStaging + StepDirName(step) + ".attempt" + std::to_string(attempt));
  std::error_code ec;
  fs::create_directories(root, ec);
  fs::remove_all(dir, ec);  // a crashed save's
  if (!fs::create_directories(dir, ec))
    throw std::runtime_error("checkpoint: cannot create " + dir.string() + ": " + ec.message());
  return dir;
}

// The attempt of a staging folder's name (FreshStagingDir); nullopt for any other name.
std::optional<int> StagingAttempt(const std::string& name) {
  const size_t at = name.rfind(".attempt");
  if (name.rfind(kStaging, 0) != 0 || at == std::string::npos) return std::nullopt;
  char* end = nullptr;
  const long attempt = std::strtol(name.c_str() + at + 8, &end, 10);
  if (end == name.c_str() + at + 8 || *end != '\0') return std::nullopt;
  return static_cast<int>(attempt);
}

// model.pt (only the trainable parameters of a model with frozen ones), and optimizer.pt
// or, for an optimizer cut across the ranks, every rank's shard.
void WriteModelAndOptimizer(torch::nn::Module& model, torch::optim::Optimizer& optimizer, CheckpointFiles* files) {
  auto* sharded = dynamic_cast<ShardedOptimizerState*>(&optimizer);
  {
    std::set<const c10::TensorImpl*> in_shards;
    if (sharded != nullptr)
      for (const torch::Tensor& p : sharded->ParametersInShards()) in_shards.insert(p.unsafeGetTensorImpl());
    torch::serialize::OutputArchive archive;
    SaveModel(model, archive, HasFrozen(model), in_shards);
    files->Stream("model.pt", archive);
  }
  if (sharded != nullptr) return sharded->ExchangeShards(files);
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  files->Stream("optimizer.pt", archive);
}

}  // namespace

SavedCheckpoint CheckpointManager::Save(const RunPosition& position, torch::nn::Module& model,
                                        torch::optim::Optimizer& optimizer) {
  const auto t0 = std::chrono::steady_clock::now();
  CheckFence();  // a superseded attempt writes nothing
  const fs::path dir = FreshStagingDir(options_.dir, position.step, options_.attempt);
  CheckpointFiles files(dir);
  WriteModelAndOptimizer(model, optimizer, &files);

  format::CheckpointManifest& manifest = files.manifest();
  manifest.position = PositionToJson(position);
  manifest.fingerprint = position.fingerprint;
  manifest.attempt = options_.attempt;
  NameKeptStep(position.step, &manifest);
  const std::string text = format::ManifestText(manifest);
  Check(io::WriteFileAtomically((dir / format::kCheckpointManifest).string(), text));
  const std::string complete = std::to_string(position.step) + "\n";
  Check(io::WriteFileAtomically((dir / kComplete).string(), complete));

  SavedCheckpoint saved;
  saved.path = Commit(dir, position.step);
  saved.bytes = files.bytes() + static_cast<int64_t>(text.size() + complete.size());
  last_save_ = std::chrono::steady_clock::now();
  saved.seconds = std::chrono::duration<double>(last_save_ - t0).count();
  CheckFence();  // a claim that came in the window after the first check: no pruning
  Prune(position.step);
  return saved;
}

void CheckpointManager::NameKeptStep(int64_t step, format::CheckpointManifest* manifest) const {
  if (kept_step_ <= 0 || kept_step_ == step) return;
  const fs::path kept = fs::path(options_.dir) / format::StepDirName(kept_step_);
  if (!format::IsComplete(kept.string())) return;  // not here (resumed on a worker that lacks it)
  std::ifstream in(kept / format::kCheckpointManifest, std::ios::binary);
  if (!in.is_open()) return;
  std::ostringstream text;
  text << in.rdbuf();
  manifest->best_step = kept_step_;
  manifest->best_manifest_sha256 = crypto::Sha256Hex(text.str());
}

int CheckpointManager::FenceHolder() const {
  std::ifstream in(fs::path(options_.dir) / kFence);
  int holder = -1;
  return in >> holder ? holder : -1;
}

void CheckpointManager::Claim() {
  if (options_.attempt < 0) return;
  const int holder = FenceHolder();
  if (holder > options_.attempt)
    throw FencedError("checkpoint folder " + options_.dir + " is fenced by attempt " + std::to_string(holder) +
                      "; this is attempt " + std::to_string(options_.attempt) + ", which was superseded");
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  Check(io::WriteFileAtomically((fs::path(options_.dir) / kFence).string(), std::to_string(options_.attempt) + "\n"));
  Check(io::SyncDirectory(options_.dir));
}

void CheckpointManager::CheckFence() const {
  if (options_.attempt < 0) return;
  if (const int holder = FenceHolder(); holder > options_.attempt)
    throw FencedError("fenced by attempt " + std::to_string(holder) + ": attempt " + std::to_string(options_.attempt) +
                      " was superseded and commits no more checkpoints in " + options_.dir);
}

bool CheckpointManager::WrittenByALaterAttempt(const std::string& dir) const {
  if (options_.attempt < 0) return false;
  format::CheckpointManifest m;
  return format::ReadManifest(dir, &m).empty() && m.attempt > options_.attempt;
}

std::vector<std::string> CheckpointManager::ListComplete() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    const int64_t step = format::StepOfDirName(entry.path().filename().string());
    if (step >= 0 && fs::exists(entry.path() / kComplete) && !WrittenByALaterAttempt(entry.path().string()))
      found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

void CheckpointManager::Prune(int64_t saved) {
  // Those up to the one just saved: one after it is there only because the resume could
  // not load it (LoadLatest went past it), and counting it would remove the good ones.
  std::vector<std::string> complete;
  for (std::string& dir : ListComplete())
    if (format::StepOfDirName(fs::path(dir).filename().string()) <= saved) complete.push_back(std::move(dir));
  const size_t keep = static_cast<size_t>(std::max(options_.keep_last, 1));
  for (size_t i = 0; i + keep < complete.size(); ++i)
    if (format::StepOfDirName(fs::path(complete[i]).filename().string()) != kept_step_) RemoveCheckpoint(complete[i]);
  // Leftovers of saves that crashed before their marker, older than the one just saved;
  // staging folders of this attempt and earlier ones (a superseded attempt's save then fails).
  const int64_t newest = saved;
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    const int64_t step = format::StepOfDirName(name);
    const std::optional<int> staged_by = StagingAttempt(name);
    if ((step >= 0 && step < newest && !fs::exists(entry.path() / kComplete)) ||
        (staged_by && *staged_by <= options_.attempt))
      leftovers.push_back(entry.path());
  }
  for (const fs::path& leftover : leftovers) fs::remove_all(leftover, ec);
  Check(io::SyncDirectory(options_.dir));
}

namespace {

// Reads and checks one checkpoint: its manifest, and the size and checksum of every
// file the manifest lists. Throws std::runtime_error naming the directory.
RunPosition ReadCheckpoint(const fs::path& dir) {
  format::CheckpointManifest m;
  Check(format::ReadManifest(dir.string(), &m));
  if (m.version < format::kOldestCheckpointVersion || m.version > format::kCheckpointVersion)
    throw CheckpointVersionError("checkpoint: " + dir.string() + " has manifest version " +
                                 std::to_string(m.version) + "; this trainer reads versions " +
                                 std::to_string(format::kOldestCheckpointVersion) + " to " +
                                 std::to_string(format::kCheckpointVersion) +
                                 " (resume it with the trainer that wrote it, or move it away to start over)");
  RunPosition p;
  try {
    p = m.version == 1 ? PositionFromVersion1(m.position) : PositionFromJson(m.position);
  } catch (const json::exception& e) {
    throw std::runtime_error("checkpoint: bad position in " + dir.string() + "/manifest.json: " + e.what());
  }
  p.fingerprint = m.fingerprint;
  p.attempt = m.attempt;
  Check(format::VerifyFiles(dir.string(), m));
  return p;
}

// An allocation that failed: std::bad_alloc, or LibTorch's CPU or CUDA allocator.
bool OutOfMemory(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  const std::string what = e.what();
  return what.find("can't allocate memory") != std::string::npos ||
         what.find("CUDA out of memory") != std::string::npos;
}

}  // namespace

bool CheckpointManager::PeekLatest(RunPosition* position, std::string* path) const {
  std::vector<std::string> complete = ListComplete();
  // Newest first; a damaged one is skipped (with a warning) for the one before it.
  for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
    try {
      *position = ReadCheckpoint(*it);
      if (path != nullptr) *path = *it;
      return true;
    } catch (const CheckpointVersionError&) {
      throw;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nightshift-trainer: warning: %s; trying an older checkpoint\n", e.what());
    }
  }
  if (!complete.empty())
    throw std::runtime_error("checkpoint: none of the " + std::to_string(complete.size()) + " checkpoints in " +
                             options_.dir + " is readable (delete them to start over)");
  return false;
}

namespace {

// Tensors are read onto the model's device, whatever device wrote them (a checkpoint
// of a GPU run resumes on the CPU and the other way round).
torch::Device DeviceOf(torch::nn::Module& model) {
  for (const auto& p : model.parameters()) return p.device();
  return torch::kCPU;
}

// The ranges of the flat layout (the trainable parameters in the model's order, as the
// optimizer shard files hold them) of the parameters model.pt left out (`missing`:
// sharding full's blocks), and the layout's length.
std::pair<ShardedOptimizerState::Ranges, int64_t> RangesOf(const fs::path& dir, bool have_shards,
                                                          torch::nn::Module& model,
                                                          const std::vector<std::pair<std::string, torch::Tensor>>& missing) {
  std::map<const c10::TensorImpl*, int64_t> flat_at;
  int64_t total = 0;
  for (const torch::Tensor& p : model.parameters())
    if (p.requires_grad()) {
      flat_at[p.unsafeGetTensorImpl()] = total;
      total += p.numel();
    }
  ShardedOptimizerState::Ranges ranges;
  for (const auto& [name, p] : missing) {
    auto it = flat_at.find(p.unsafeGetTensorImpl());
    if (it == flat_at.end() || !have_shards)
      throw std::runtime_error("checkpoint: " + (dir / "model.pt").string() + " lacks " + name);
    ranges.emplace_back(it->second, it->second + p.numel());
  }
  return {ranges, total};
}

// Loads dir's model (and optimizer, when given) after ReadCheckpoint verified the files.
// Each shard file is read once: the values model.pt left out with the moments.
RunPosition LoadCheckpoint(const fs::path& dir, torch::nn::Module& model, torch::optim::Optimizer* optimizer) {
  RunPosition p = ReadCheckpoint(dir);
  const torch::Device device = DeviceOf(model);
  format::CheckpointManifest m;
  Check(format::ReadManifest(dir.string(), &m));
  std::vector<std::string> shards;
  for (const auto& [name, entry] : m.files)
    if (IsOptimizerShardFile(name)) shards.push_back(name);
  // Sharding full between steps: the blocks' values go into the shards (LoadShards).
  auto* sharded = dynamic_cast<ShardedOptimizerState*>(optimizer);
  std::set<const c10::TensorImpl*> freed;
  if (sharded != nullptr && sharded->ParametersFreed()) {
    if (shards.empty())
      throw WholeParametersNeeded("checkpoint: " + dir.string() + " has no optimizer shard files (written unsharded)");
    for (const torch::Tensor& t : sharded->ParametersInShards()) freed.insert(t.unsafeGetTensorImpl());
  }
  std::vector<std::pair<std::string, torch::Tensor>> missing;
  {
    torch::serialize::InputArchive archive;
    archive.load_from((dir / "model.pt").string(), device);
    LoadModel(model, archive, HasFrozen(model), "", &missing, freed);
  }
  const auto [ranges, total] = RangesOf(dir, !shards.empty(), model, missing);
  std::vector<torch::Tensor> values;
  // A sharded run's checkpoint resumed unsharded: the whole flat range's moments, from every
  // shard, read with the blocks' values model.pt left out.
  auto* adamw = sharded == nullptr ? dynamic_cast<torch::optim::AdamW*>(optimizer) : nullptr;
  const bool flat_moments = adamw != nullptr && !shards.empty();
  if (sharded != nullptr) {
    values = sharded->LoadShards(dir.string(), shards, ranges);
  } else if (!ranges.empty() || flat_moments) {
    FlatRead read = ReadFlatState(dir.string(), shards, flat_moments ? ShardedOptimizerState::Ranges{{0, total}}
                                                                     : ShardedOptimizerState::Ranges{},
                                  ranges, total, device);
    for (FlatAdamState& v : read.values) values.push_back(std::move(v.values));
    if (flat_moments) {
      if (read.moments.front().end != FlatNumel(*adamw))
        throw std::runtime_error("checkpoint: " + dir.string() + "'s optimizer shards hold " +
                                 std::to_string(read.moments.front().end) + " values; the optimizer updates " +
                                 std::to_string(FlatNumel(*adamw)));
      SetFlatState(*adamw, read.moments.front());
    }
  } else if (optimizer != nullptr) {
    torch::serialize::InputArchive archive;
    archive.load_from((dir / "optimizer.pt").string(), device);
    optimizer->load(archive);
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < missing.size(); ++i) missing[i].second.copy_(values[i].view(missing[i].second.sizes()));
  return p;
}

}  // namespace

RunPosition CheckpointManager::LoadModelAt(int64_t step, torch::nn::Module& model) const {
  std::string kept;
  for (const std::string& dir : ListComplete()) {
    const int64_t s = format::StepOfDirName(fs::path(dir).filename().string());
    if (s == step) return LoadCheckpoint(dir, model, nullptr);
    kept += (kept.empty() ? "" : ", ") + std::to_string(s);
  }
  throw std::runtime_error("no complete checkpoint at step " + std::to_string(step) + " in " + options_.dir +
                           " (kept: " + (kept.empty() ? "none" : kept) + ")");
}

std::map<std::string, std::string> ReadCheckpointFiles(const std::string& step_dir) {
  std::map<std::string, std::string> files;
  const std::string& text = files[format::kCheckpointManifest] =
      ReadFile(fs::path(step_dir) / format::kCheckpointManifest);
  format::CheckpointManifest m;
  if (std::string err = format::ParseManifest(text, &m); !err.empty()) Check(step_dir + "/" + err);
  if (m.files.empty())  // version 1 without checksums: another rank could not verify it
    throw std::runtime_error("checkpoint: " + step_dir + "/manifest.json lists no files");
  for (const auto& [name, entry] : m.files) files[name] = ReadFile(fs::path(step_dir) / name);
  return files;
}

std::string CheckpointManager::Install(int64_t step, const std::map<std::string, std::string>& files) {
  CheckFence();
  const fs::path dir = FreshStagingDir(options_.dir, step, options_.attempt);
  std::error_code ec;
  try {
    for (const auto& [file, bytes] : files) {
      if (!format::IsPlainFileName(file) || file == kComplete)
        throw std::runtime_error("checkpoint: a received file is named \"" + file + "\"");
      Check(io::WriteFileAtomically((dir / file).string(), bytes));
    }
    if (ReadCheckpoint(dir).step != step)
      throw std::runtime_error("checkpoint: the received checkpoint is not of step " + std::to_string(step));
  } catch (...) {
    fs::remove_all(dir, ec);
    throw;
  }
  Check(io::WriteFileAtomically((dir / kComplete).string(), std::to_string(step) + "\n"));
  return Commit(dir, step);
}

std::string CheckpointManager::Commit(const fs::path& staged, int64_t step) {
  const fs::path dir = fs::path(options_.dir) / StepDirName(step);
  std::error_code ec;
  try {
    CheckFence();
    if (WrittenByALaterAttempt(dir.string()))  // committed by a successor the fence was not yet showing
      throw FencedError("attempt " + std::to_string(options_.attempt) + " was superseded: a later attempt wrote " +
                        dir.string());
  } catch (const FencedError&) {
    fs::remove_all(staged, ec);  // never committed
    throw;
  }
  if (fs::exists(fs::symlink_status(dir, ec))) RemoveCheckpoint(dir);  // a crashed or damaged save's, ours or older
  fs::rename(staged, dir, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove_all(staged, ec);
    throw std::runtime_error("checkpoint: cannot rename " + staged.string() + " to " + dir.string() + ": " + why);
  }
  Check(io::SyncDirectory(options_.dir));
  return dir.string();
}

bool CheckpointManager::LoadLatest(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                   RunPosition* position, std::string* path) {
  std::vector<std::string> complete = ListComplete();
  for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
    const fs::path dir = *it;
    try {
      RunPosition p = LoadCheckpoint(dir, model, &optimizer);
      *position = std::move(p);
      if (path != nullptr) *path = dir.string();
      return true;
    } catch (const CheckpointVersionError&) {
      throw;
    } catch (const WholeParametersNeeded&) {
      throw;
    } catch (const std::exception& e) {
      // Out of memory says nothing about the checkpoint: an older one would lose the steps
      // since, and the advice below to delete them would lose them all.
      if (OutOfMemory(e)) throw;
      // An older checkpoint overwrites every parameter and optimizer state it loads.
      std::string what = e.what();
      what = what.substr(0, what.find('\n'));
      std::fprintf(stderr, "nightshift-trainer: warning: cannot load %s: %s; trying an older checkpoint\n",
                   dir.c_str(), what.c_str());
    }
  }
  if (!complete.empty())
    throw std::runtime_error("checkpoint: none of the " + std::to_string(complete.size()) + " checkpoints in " +
                             options_.dir + " is loadable (delete them to start over)");
  return false;
}

std::string RunFingerprint(uint64_t seed, int64_t batch_size, int64_t max_tokens, bool max_tokens_auto,
                           const std::vector<std::string>& shard_descriptions,
                           const std::string& model_description) {
  std::string f = "seed=" + std::to_string(seed) + ";batch_size=" + std::to_string(batch_size) +
                  ";max_tokens=" + (max_tokens_auto ? std::string("auto") : std::to_string(max_tokens));
  for (const std::string& d : shard_descriptions) f += ";" + d;
  return f + ";" + model_description;
}

namespace {

// A generator's state as bytes (get_state: a CPU uint8 tensor, whatever the device), and back.
std::string StateBytes(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor state = gen.get_state().contiguous();
  return std::string(reinterpret_cast<const char*>(state.data_ptr<uint8_t>()),
                     static_cast<size_t>(state.numel()));
}

void SetStateBytes(at::Generator gen, const std::string& bytes) {
  auto state = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(state.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

std::string GetCpuRngState() { return StateBytes(at::detail::getDefaultCPUGenerator()); }

void SetCpuRngState(const std::string& bytes) { SetStateBytes(at::detail::getDefaultCPUGenerator(), bytes); }

std::string GetDeviceRngState(const torch::Device& device) {
  return device.is_cpu() ? std::string() : StateBytes(at::globalContext().defaultGenerator(device));
}

void SetDeviceRngState(const torch::Device& device, const std::string& bytes) {
  if (!device.is_cpu() && !bytes.empty()) SetStateBytes(at::globalContext().defaultGenerator(device), bytes);
}

}  // namespace nightshift::trainer
