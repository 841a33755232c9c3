#include "worker/trainer/models/hf_weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14 (older headers)
#endif
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string_view>

#include "common/io/atomic_file.h"
#include "worker/trainer/errors.h"

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxJsonBytes = uint64_t{64} << 20;  // config.json, the shard index

std::string ReadJson(const std::string& path, const std::vector<std::string>& roots, const std::string& hint = "") {
  std::string text;
  if (std::string e = io::ReadFileBeneath(roots, path, kMaxJsonBytes, &text); !e.empty())
    throw PermanentError(e + hint);
  return text;
}

}  // namespace

HfConfig ReadHfConfig(const std::string& dir, const std::vector<std::string>& roots) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const std::string text = ReadJson(path, roots, " (a Hugging Face model folder has a config.json)");
  HfConfig h;
  if (std::string e = ParseHfConfig(text, path, &h); !e.empty()) throw PermanentError(e);
  return h;
}

// One weight file mapped copy-on-write for the life of the tensors that refer to it: the
// HfWeights, and the parameters that are views of it (through their storages).
struct HfWeights::Mapping {
  std::string path;
  const char* data = nullptr;
  size_t size = 0;
  uint64_t fingerprint = 0;  // of the file (MappedWeightFingerprint)
  // Set by the first view (ShareOrCopyTo). Once there are views, CopyTo drops only the
  // pages wholly inside the tensor it converts: a page a view has written is this
  // process's only copy of it.
  mutable bool has_views = false;
  ~Mapping() {
    if (data != nullptr) ::munmap(const_cast<char*>(data), size);
  }
};

namespace {

// The deleter of a Mapping's storage: its context is a heap shared_ptr to the mapping.
void ReleaseMapping(void* context) { delete static_cast<std::shared_ptr<const HfWeights::Mapping>*>(context); }

// (device, inode, size, mtime) and a hash of the first and last MiB: a file's identity
// across processes on one machine, and its content's where the path is shared storage.
uint64_t FileFingerprint(const struct stat& st, const char* data, size_t size) {
  const size_t edge = std::min<size_t>(size, size_t{1} << 20);
  const std::string identity = std::to_string(st.st_dev) + "/" + std::to_string(st.st_ino) + "/" +
                               std::to_string(st.st_size) + "/" + std::to_string(st.st_mtim.tv_sec) + "." +
                               std::to_string(st.st_mtim.tv_nsec) + "/" +
                               std::to_string(std::hash<std::string_view>{}(std::string_view(data, edge))) + "/" +
                               std::to_string(std::hash<std::string_view>{}(std::string_view(data + size - edge, edge)));
  return std::hash<std::string>{}(identity);
}

// Drops the mapped pages of [from, from + len) from this process (the page cache keeps
// them). `whole_only`: only the pages wholly inside, where a page shared with a neighbour
// may hold what a view of that neighbour wrote (a file with views); else every page it
// touches.
void DropPages(const void* from, size_t len, bool whole_only) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(from), last = first + len;
  const uintptr_t begin = whole_only ? (first + page - 1) / page * page : first / page * page;
  const uintptr_t end = whole_only ? last / page * page : (last + page - 1) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

void HfWeights::AddFile(const std::string& path, const std::vector<std::string>& roots,
                        const std::map<std::string, std::string>* shard_of) {
  std::string error;
  const int fd = io::OpenFileBeneath(roots, path, &error);
  if (fd < 0) throw PermanentError(error);
  format::SafetensorsHeader header;
  if (std::string e = format::ReadSafetensorsHeader(fd, path, &header); !e.empty()) {
    ::close(fd);
    throw PermanentError(e);
  }
  auto file = std::make_shared<Mapping>();
  file->path = path;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw PermanentError(path + ": cannot be opened: " + why);
  }
  // The header was checked against the file's size: the tensors end where the file does.
  const uint64_t expected = header.tensors.empty() ? header.data_start : header.tensors.back().end;
  file->size = static_cast<size_t>(st.st_size);
  if (file->size != expected) {
    ::close(fd);
    throw PermanentError(path + ": changed while it was being read");
  }
  // Writable but private: a view's parameter written by training gets its own page.
  void* data = ::mmap(nullptr, file->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file
  if (data == MAP_FAILED) throw PermanentError(path + ": cannot be mapped: " + std::strerror(map_errno));
  file->data = static_cast<const char*>(data);
  file->fingerprint = FileFingerprint(st, file->data, file->size);
  const std::string file_name = fs::path(path).filename().string();
  for (format::SafetensorsTensor& t : header.tensors) {
    if (shard_of != nullptr) {
      auto it = shard_of->find(t.name);
      if (it == shard_of->end() || it->second != file_name)
        throw PermanentError(path + ": tensor " + t.name + " is " +
                             (it == shard_of->end() ? "not in model.safetensors.index.json"
                                                    : "in the index under shard " + it->second));
    }
    if (tensors_.count(t.name)) throw PermanentError(path + ": tensor " + t.name + " is in more than one file");
    const std::string name = t.name;
    tensors_[name] = Entry{file, std::move(t)};
  }
}

HfWeights HfWeights::Open(const std::string& dir, const std::vector<std::string>& roots) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  HfWeights w;
  w.dir_ = dir;
  if (fs::exists(single, ec)) {
    w.AddFile(single.string(), roots, nullptr);
    return w;
  }
  if (!fs::exists(index, ec))
    throw PermanentError(dir + ": neither model.safetensors nor model.safetensors.index.json is there "
                         "(only safetensors weights are read: save a pytorch_model.bin folder again with "
                         "save_pretrained(DIR, safe_serialization=True))");
  std::map<std::string, std::string> shard_of;
  if (std::string e = format::ParseSafetensorsIndex(ReadJson(index.string(), roots), index.string(), &shard_of);
      !e.empty())
    throw PermanentError(e);
  std::set<std::string> shards;
  for (const auto& [name, shard] : shard_of) shards.insert(shard);
  for (const std::string& shard : shards) w.AddFile((fs::path(dir) / shard).string(), roots, &shard_of);
  for (const auto& [name, shard] : shard_of)
    if (!w.contains(name))
      throw PermanentError(index.string() + ": tensor " + name + " is not in its shard " + shard);
  return w;
}

HfWeights HfWeights::OpenFile(const std::string& path, const std::vector<std::string>& roots) {
  HfWeights w;
  w.dir_ = fs::path(path).parent_path().string();
  w.AddFile(path, roots, nullptr);
  return w;
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : tensors_) out.push_back(name);
  return out;
}

std::vector<int64_t> HfWeights::shape(const std::string& name) const {
  auto it = tensors_.find(name);
  TORCH_CHECK(it != tensors_.end(), "no tensor ", name);
  return it->second.tensor.shape;
}

void HfWeights::CopyTo(const std::string& name, torch::Tensor& dst) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw PermanentError("the weights have no tensor " + name);
  const Mapping& file = *it->second.file;
  const format::SafetensorsTensor& t = it->second.tensor;
  torch::ScalarType type;
  switch (t.dtype) {
    case format::DType::kF32: type = torch::kFloat32; break;
    case format::DType::kF16: type = torch::kFloat16; break;
    case format::DType::kBF16: type = torch::kBFloat16; break;
    default:
      throw PermanentError(file.path + ": tensor " + name + " is " + format::DTypeName(t.dtype) +
                           " (weights are read from F32, F16 or BF16)");
  }
  if (dst.sizes() != c10::IntArrayRef(t.shape))
    throw PermanentError(file.path + ": tensor " + name + " has shape " + c10::str(c10::IntArrayRef(t.shape)) +
                         ", the model built from config.json needs " + c10::str(dst.sizes()));
  const char* bytes = file.data + t.begin;
  const size_t n = t.end - t.begin, element = format::DTypeSize(t.dtype);
  // Once copied, its pages leave this process (only those wholly inside once the file has
  // views: Mapping).
  const auto drop = [&](const char* from, size_t len) { DropPages(from, len, file.has_views); };
  torch::NoGradGuard no_grad;
  if (reinterpret_cast<uintptr_t>(bytes) % element != 0 || !dst.is_contiguous()) {  // alignment is not promised
    torch::Tensor src = torch::empty(t.shape, torch::TensorOptions().dtype(type));
    std::memcpy(src.data_ptr(), bytes, n);
    drop(bytes, n);
    dst.copy_(src);  // converts to dst's dtype and device (a transposed view: GPT-2's Conv1D)
    return;
  }
  // Views of the mapped bytes (read only), copied in chunks whose pages are dropped from
  // this process as soon as they are copied (the page cache keeps them; a page shared with
  // the next chunk or tensor is faulted in again from it), so no more than a chunk of the
  // file is resident beside the parameters.
  constexpr size_t kChunk = size_t{16} << 20;  // bytes
  const int64_t count = static_cast<int64_t>(n / element), per_chunk = static_cast<int64_t>(kChunk / element);
  torch::Tensor flat = dst.view({-1});
  for (int64_t at = 0; at < count; at += per_chunk) {
    const int64_t len = std::min(per_chunk, count - at);
    const char* from = bytes + at * static_cast<int64_t>(element);
    flat.narrow(0, at, len).copy_(torch::from_blob(const_cast<char*>(from), {len}, torch::TensorOptions().dtype(type)));
    drop(from, static_cast<size_t>(len) * element);
  }
}

bool HfWeights::ShareOrCopyTo(const std::string& name, torch::Tensor& param) const {
  static const bool copy_all = [] {
    const char* v = std::getenv("NIGHTSHIFT_COPY_WEIGHTS");
    return v != nullptr && std::string(v) == "1";
  }();
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw PermanentError("the weights have no tensor " + name);
  const std::shared_ptr<Mapping>& file = it->second.file;
  const format::SafetensorsTensor& t = it->second.tensor;
  const bool same_dtype = (t.dtype == format::DType::kF32 && param.scalar_type() == torch::kFloat32) ||
                          (t.dtype == format::DType::kBF16 && param.scalar_type() == torch::kBFloat16) ||
                          (t.dtype == format::DType::kF16 && param.scalar_type() == torch::kFloat16);
  if (copy_all || !same_dtype || t.begin % format::DTypeSize(t.dtype) != 0 || !param.device().is_cpu() ||
      !param.is_contiguous() || param.sizes() != c10::IntArrayRef(t.shape)) {
    CopyTo(name, param);
    return false;
  }
  file->has_views = true;
  // Faulted in now, read-only (the page cache's pages, still shared: a write fault would
  // copy them): an I/O error shows here rather than in the first step, and the resident
  // set tells what the job holds. Reading a byte of each page where the kernel lacks
  // MADV_POPULATE_READ (Linux < 5.14) does the same.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(file->data + t.begin) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(file->data + t.end);
  if (end > begin && ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) != 0) {
    volatile char sink = 0;
    for (uintptr_t at = begin; at < end; at += page) sink = sink + *reinterpret_cast<const volatile char*>(at);
  }
  // A storage of the tensor's own bytes (a checkpoint of the parameter writes those, not
  // the file), whose context keeps the mapping alive.
  c10::DataPtr bytes(const_cast<char*>(file->data + t.begin), new std::shared_ptr<const Mapping>(file),
                     &ReleaseMapping, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), t.end - t.begin, std::move(bytes), nullptr, false);
  torch::NoGradGuard no_grad;
  torch::Tensor view = torch::empty({0}, param.scalar_type());
  view.set_(storage, 0, t.shape);
  param.set_data(view);
  return true;
}

void DropMappedPages(const torch::Tensor& t) {
  if (!MappedWeightFingerprint(t)) return;
  DropPages(t.data_ptr(), t.nbytes(), /*whole_only=*/true);
}

std::optional<uint64_t> MappedWeightFingerprint(const torch::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.storage().data_ptr().get_deleter() != &ReleaseMapping) return std::nullopt;
  const auto* file = static_cast<const std::shared_ptr<const HfWeights::Mapping>*>(t.storage().data_ptr().get_context());
  const auto at = static_cast<const char*>(t.data_ptr()) - (*file)->data;  // bytes into the file
  return std::hash<std::string>{}(std::to_string((*file)->fingerprint) + "@" + std::to_string(at) + "+" +
                                  std::to_string(t.numel()));
}

torch::Tensor HfWeights::Float(const std::string& name) const {
  torch::Tensor out = torch::empty(shape(name), torch::kFloat32);
  CopyTo(name, out);
  return out;
}

namespace {

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool StartsWithAny(const std::string& s, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return StartsWith(s, p); });
}

// The parameter name a checkpoint name stands for: the base prefix added to a bare
// model's names, LayerNorm.gamma/beta (TensorFlow-era names) as weight/bias.
std::string ParameterName(std::string name, const HfNameRules& rules, bool bare) {
  if (bare) name = rules.base_prefix + name;
  for (const auto& [old_suffix, new_suffix] : {std::pair{".gamma", ".weight"}, std::pair{".beta", ".bias"}})
    if (name.size() > std::strlen(old_suffix) && name.compare(name.size() - std::strlen(old_suffix), std::string::npos, old_suffix) == 0 &&
        name.find("LayerNorm") != std::string::npos)
      return name.substr(0, name.size() - std::strlen(old_suffix)) + new_suffix;
  return name;
}

std::string List(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 20; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 20) out += " and " + std::to_string(names.size() - 20) + " more";
  return out;
}

// Parameter name -> the checkpoint's name of the tensor loaded into it.
std::map<std::string, std::string> SourceNames(const HfWeights& weights, const HfNameRules& rules) {
  const std::vector<std::string> names = weights.names();
  const bool bare = !rules.base_prefix.empty() &&
                    std::none_of(names.begin(), names.end(), [&](const std::string& n) { return StartsWith(n, rules.base_prefix); });
  std::map<std::string, std::string> source;
  for (const std::string& n : names) {
    const std::string p = ParameterName(n, rules, bare);
    const bool dropped = std::any_of(rules.ignored_suffixes.begin(), rules.ignored_suffixes.end(), [&](const std::string& s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    });
    if (!dropped && !StartsWithAny(n, rules.ignored) && !StartsWithAny(p, rules.ignored)) source[p] = n;
  }
  return source;
}

// A new head's tensor, as transformers' _init_weights makes one.
void InitHeadTensor(torch::Tensor& t, const HfNameRules& rules) {
  torch::NoGradGuard no_grad;
  t.dim() >= 2 ? t.normal_(0.0, rules.initializer_range) : t.zero_();
}

}  // namespace

std::set<std::string> InitNewHead(const HfWeights& weights, const HfNameRules& rules, torch::nn::Module& model) {
  const std::map<std::string, std::string> source = SourceNames(weights, rules);
  std::vector<std::pair<std::string, torch::Tensor>> head;
  for (auto& p : model.named_parameters(/*recurse=*/true))
    if (StartsWithAny(p.key(), rules.head) && !rules.written.count(p.key())) head.emplace_back(p.key(), p.value());
  std::set<std::string> made;
  if (head.empty() || std::any_of(head.begin(), head.end(), [&](const auto& h) { return source.count(h.first) > 0; }))
    return made;  // the folder's head (or half of one: LoadHfWeights' error)
  for (auto& [name, t] : head) {
    InitHeadTensor(t, rules);
    made.insert(name);
  }
  return made;
}

void LoadHfWeights(const HfWeights& weights, const HfNameRules& rules, torch::nn::Module& model,
                   const std::function<void(const torch::Tensor&)>& before) {
  std::map<std::string, std::string> source = SourceNames(weights, rules);
  std::set<std::string> written = InitNewHead(weights, rules, model);  // loading draws nothing: the same draws
  written.insert(rules.written.begin(), rules.written.end());
  std::vector<std::string> missing;  // half a head among them: it is not a new head
  for (auto& p : model.named_parameters(/*recurse=*/true)) {
    if (written.count(p.key())) {
      source.erase(p.key());
      continue;
    }
    auto it = source.find(p.key());
    if (it != source.end()) {
      if (before) before(p.value());
      weights.ShareOrCopyTo(it->second, p.value());
      if (auto r = rules.round_through.find(p.key()); r != rules.round_through.end()) {
        torch::NoGradGuard no_grad;
        p.value().copy_(p.value().to(r->second));
      }
      source.erase(it);
    } else {
      missing.push_back(p.key());
    }
  }
  std::vector<std::string> leftover;
  for (const auto& [param, name] : source) leftover.push_back(name);
  if (!missing.empty() || !leftover.empty())
    throw PermanentError(weights.dir() + ": the weights do not match the architecture config.json names: " +
                         (missing.empty() ? std::string() : "missing " + List(missing)) +
                         (missing.empty() || leftover.empty() ? "" : "; ") +
                         (leftover.empty() ? std::string() : "not used " + List(leftover)));
}

}  // namespace nightshift::trainer
