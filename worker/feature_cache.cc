#include "worker/feature_cache.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/io/atomic_file.h"
#include "common/log.h"
#include "common/time_util.h"
#include <google/protobuf/util/time_util.h>

namespace fs = std::filesystem;

namespace nightshift {
namespace {

constexpr char kEntryPrefix[] = "entry/";
constexpr char kFilePrefix[] = "file/";

std::string Hex128(const XXH128_hash_t& h) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

// XXH3-128 of a file's contents.
Status HashContents(const std::string& path, std::string* hex, int64_t* bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound("cannot open " + path);
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  std::vector<char> buf(1 << 20);
  int64_t total = 0;
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
    XXH3_128bits_update(state, buf.data(), static_cast<size_t>(n));
    total += n;
  }
  ::close(fd);
  *hex = Hex128(XXH3_128bits_digest(state));
  XXH3_freeState(state);
  if (n < 0) return Status::IOError("cannot read " + path);
  if (bytes) *bytes = total;
  return Status::OK();
}

}  // namespace

CacheLease::~CacheLease() { cache_->Release(key_); }

FeatureCache::FeatureCache(const FeatureCacheOptions& options, rocksdb::DB* db) : options_(options), db_(db) {}
FeatureCache::~FeatureCache() = default;

StatusOr<std::unique_ptr<FeatureCache>> FeatureCache::Open(const FeatureCacheOptions& options) {
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) return Status::IOError("cannot create cache dir " + options.dir + ": " + ec.message());
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.dir + "/index", &db);
  if (!s.ok()) return Status::IOError("cannot open cache index in " + options.dir + "/index: " + s.ToString());
  std::unique_ptr<FeatureCache> cache(new FeatureCache(options, db));
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(kEntryPrefix); it->Valid() && it->key().starts_with(kEntryPrefix); it->Next()) {
    v1::CacheEntry entry;
    if (!entry.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      NS_WARN("cache: dropping unreadable index record " << it->key().ToString());
      db->Delete(rocksdb::WriteOptions(), it->key());
      continue;
    }
    cache->entries_[entry.key()] = entry;
  }
  // Folders that are not complete entries: interrupted builds, or files whose index
  // record was deleted (eviction deletes the record first).
  for (const auto& d : fs::directory_iterator(options.dir, ec)) {
    const std::string name = d.path().filename().string();
    if (name == "index") continue;
    if (!cache->entries_.count(name)) {
      NS_INFO("cache: removing incomplete " << d.path().string());
      fs::remove_all(d.path(), ec);
    }
  }
  for (const auto& [key, e] : cache->entries_) cache->stats_.set_bytes(cache->stats_.bytes() + e.bytes());
  cache->stats_.set_entries(static_cast<int64_t>(cache->entries_.size()));
  cache->stats_.set_max_bytes(options.max_bytes);
  return cache;
}

Status FeatureCache::HashFile(const InputFile& file, std::string* hash) {
  struct stat st;
  if (::stat(file.path.c_str(), &st) != 0) return Status::NotFound("cannot stat " + file.path);
  // The file as it is now: its size, its mtime and its ctime, which its writer cannot set
  // back (utimensat sets the mtime, and moves the ctime to now), on that device and inode.
  const auto ns = [](const timespec& t) { return std::to_string(int64_t{t.tv_sec} * 1000000000 + t.tv_nsec); };
  const std::string seen = "v2 " + std::to_string(st.st_size) + " " + ns(st.st_mtim) + " " + ns(st.st_ctim) + " " +
                           std::to_string(st.st_dev) + " " + std::to_string(st.st_ino) + " ";
  const std::string db_key = kFilePrefix + file.path;
  std::string stored;
  if (db_->Get(rocksdb::ReadOptions(), db_key, &stored).ok() && stored.size() > seen.size() &&
      stored.compare(0, seen.size(), seen) == 0) {
    *hash = stored.substr(seen.size());
    return Status::OK();
  }
  NS_RETURN_IF_ERROR(HashContents(file.path, hash, nullptr));
  db_->Put(rocksdb::WriteOptions(), db_key, seen + *hash);
  return Status::OK();
}

StatusOr<std::string> FeatureCache::KeyFor(const PrepOptions& options) {
  std::vector<InputFile> files;
  NS_RETURN_IF_ERROR(ListInputs(options, &files));
  for (const std::string& path : PretrainedInputs(options)) {  // the tokenizer's files, by content
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) return Status::NotFound("model.pretrained: cannot read " + path);
    files.push_back({"pretrained/" + fs::path(path).filename().string(), "", path});
  }
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  for (const auto& f : files) {
    std::string h;
    Status s = HashFile(f, &h);
    if (!s.ok()) {
      XXH3_freeState(state);
      return s;
    }
    const std::string line = f.id + '\0' + h + '\n';
    XXH3_128bits_update(state, line.data(), line.size());
  }
  const std::string fp = OptionsFingerprint(options);
  XXH3_128bits_update(state, fp.data(), fp.size());
  std::string key = Hex128(XXH3_128bits_digest(state));
  XXH3_freeState(state);
  return key;
}

bool FeatureCache::Verify(const v1::CacheEntry& entry, std::string* why) {
  if (entry.files_size() == 0) {
    *why = "entry has no files";
    return false;
  }
  for (const auto& f : entry.files()) {
    std::string hex;
    int64_t bytes = 0;
    const std::string path = entry.dir() + "/" + f.name();
    if (!HashContents(path, &hex, &bytes).ok()) {
      *why = path + " is missing";
      return false;
    }
    if (bytes != f.bytes() || hex != f.xxh3()) {
      *why = path + " does not match its checksum";
      return false;
    }
  }
  return true;
}

StatusOr<std::shared_ptr<CacheLease>> FeatureCache::Acquire(const std::string& key, const std::string& data_path,
                                                            const BuildFn& build, bool* hit) {
  std::unique_lock<std::mutex> lock(mu_);
  auto found = FindVerifiedLocked(key, &lock);
  if (!found.ok()) return found.status();
  if (found.value() != nullptr) {
    *hit = true;
    return found.value();
  }
  // Miss: build outside the lock; others asking for this key wait on built_.
  building_.insert(key);
  stats_.set_misses(stats_.misses() + 1);
  const std::string build_dir = options_.dir + "/" + key + ".building-" + std::to_string(::getpid()) + "-" +
                                std::to_string(++build_counter_);
  lock.unlock();
  auto entry = Build(key, data_path, build, build_dir);
  lock.lock();
  building_.erase(key);
  version_++;
  built_.notify_all();
  if (!entry.ok()) return entry.status();
  entries_[key] = entry.value();
  in_use_[key]++;
  stats_.set_build_seconds(stats_.build_seconds() + entry->build_seconds());
  stats_.set_entries(static_cast<int64_t>(entries_.size()));
  stats_.set_bytes(stats_.bytes() + entry->bytes());
  EvictToBudgetLocked();
  *hit = false;
  NS_INFO("cache: built " << key << " for " << data_path << " in " << entry->build_seconds() << " s, "
                          << entry->bytes() << " bytes");
  return std::make_shared<CacheLease>(this, key, entry->dir());
}

StatusOr<std::shared_ptr<CacheLease>> FeatureCache::FindVerifiedLocked(const std::string& key,
                                                                       std::unique_lock<std::mutex>* lock) {
  while (building_.count(key)) built_.wait(*lock);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::shared_ptr<CacheLease>();
  const v1::CacheEntry entry = it->second;
  in_use_[key]++;  // held while verifying, so it is not evicted under us
  lock->unlock();
  std::string why;
  const bool ok = Verify(entry, &why);
  lock->lock();
  if (!ok) {
    in_use_[key]--;
    NS_WARN("cache: entry " << key << " is corrupt (" << why << "): rebuilding it");
    NS_RETURN_IF_ERROR(RemoveLocked(key));
    return std::shared_ptr<CacheLease>();
  }
  auto& e = entries_[key];
  *e.mutable_last_used() = NowTimestamp();
  std::string value;
  e.SerializeToString(&value);
  db_->Put(rocksdb::WriteOptions(), kEntryPrefix + key, value);
  stats_.set_hits(stats_.hits() + 1);
  stats_.set_build_seconds_saved(stats_.build_seconds_saved() + e.build_seconds());
  version_++;
  return std::make_shared<CacheLease>(this, key, e.dir());
}

StatusOr<v1::CacheEntry> FeatureCache::Build(const std::string& key, const std::string& data_path,
                                             const BuildFn& build, const std::string& build_dir) {
  std::error_code ec;
  fs::remove_all(build_dir, ec);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = build(build_dir);
  if (!s.ok()) {
    fs::remove_all(build_dir, ec);
    return s;
  }
  v1::CacheEntry entry;
  entry.set_key(key);
  entry.set_dir(options_.dir + "/" + key);
  entry.set_data_path(data_path);
  entry.set_build_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  NS_RETURN_IF_ERROR(DescribeFiles(build_dir, &entry));
  // Into place: the rename is atomic; the index record, written after, makes it an entry.
  fs::remove_all(entry.dir(), ec);
  fs::rename(build_dir, entry.dir(), ec);
  if (ec) return Status::IOError("cannot move " + build_dir + " into place: " + ec.message());
  std::string err = io::SyncDirectory(options_.dir);
  if (!err.empty()) return Status::IOError(err);
  *entry.mutable_created() = NowTimestamp();
  *entry.mutable_last_used() = entry.created();
  std::string value;
  entry.SerializeToString(&value);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  rocksdb::Status ws = db_->Put(sync, kEntryPrefix + key, value);
  if (!ws.ok()) return Status::IOError("cannot write cache index: " + ws.ToString());
  return entry;
}

Status FeatureCache::DescribeFiles(const std::string& build_dir, v1::CacheEntry* entry) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(build_dir, ec))
    if (f.is_regular_file()) files.push_back(f.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    v1::CacheFile* cf = entry->add_files();
    cf->set_name(f.filename().string());
    std::string hex;
    int64_t bytes = 0;
    NS_RETURN_IF_ERROR(HashContents(f.string(), &hex, &bytes));
    cf->set_xxh3(hex);
    cf->set_bytes(bytes);
    entry->set_bytes(entry->bytes() + bytes);
  }
  std::ifstream meta_in(build_dir + "/meta.json");
  nlohmann::json meta = nlohmann::json::parse(meta_in, nullptr, false);
  if (meta.is_object()) {
    entry->set_train_samples(meta.value("train_samples", int64_t{0}));
    entry->set_val_samples(meta.value("val_samples", int64_t{0}));
    entry->set_train_tokens(meta.value("train_tokens", int64_t{0}));
    if (meta.contains("length_histogram"))
      for (const auto& v : meta["length_histogram"]) entry->add_length_histogram(v.get<int64_t>());
  }
  return Status::OK();
}

void FeatureCache::Release(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (--in_use_[key] <= 0) in_use_.erase(key);
  EvictToBudgetLocked();
  version_++;
}

Status FeatureCache::RemoveLocked(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::NotFound("no cache entry " + key);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  rocksdb::Status s = db_->Delete(sync, kEntryPrefix + key);
  if (!s.ok()) return Status::IOError("cannot delete cache index record " + key + ": " + s.ToString());
  std::error_code ec;
  fs::remove_all(it->second.dir(), ec);
  stats_.set_bytes(stats_.bytes() - it->second.bytes());
  entries_.erase(it);
  stats_.set_entries(static_cast<int64_t>(entries_.size()));
  version_++;
  return Status::OK();
}

void FeatureCache::EvictToBudgetLocked() {
  if (options_.max_bytes <= 0) return;
  while (stats_.bytes() > options_.max_bytes) {
    const v1::CacheEntry* lru = nullptr;
    for (const auto& [key, e] : entries_) {
      if (in_use_.count(key)) continue;
      if (lru == nullptr || google::protobuf::util::TimeUtil::TimestampToNanoseconds(e.last_used()) <
                                google::protobuf::util::TimeUtil::TimestampToNanoseconds(lru->last_used()))
        lru = &e;
    }
    if (lru == nullptr) return;  // everything left is in use
    const std::string key = lru->key();
    NS_INFO("cache: evicting " << key << " (" << lru->bytes() << " bytes) to stay under " << options_.max_bytes);
    if (!RemoveLocked(key).ok()) return;
    stats_.set_evictions(stats_.evictions() + 1);
  }
}

Status FeatureCache::Evict(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_use_.count(key)) return Status::FailedPrecondition("cache entry " + key + " is in use by a running job");
  NS_RETURN_IF_ERROR(RemoveLocked(key));
  stats_.set_evictions(stats_.evictions() + 1);
  return Status::OK();
}

int FeatureCache::EvictAll() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> keys;
  for (const auto& [key, e] : entries_)
    if (!in_use_.count(key)) keys.push_back(key);
  int n = 0;
  for (const auto& key : keys)
    if (RemoveLocked(key).ok()) ++n;
  stats_.set_evictions(stats_.evictions() + n);
  return n;
}

v1::CacheReport FeatureCache::Report() const {
  std::lock_guard<std::mutex> lock(mu_);
  v1::CacheReport report;
  *report.mutable_stats() = stats_;
  for (const auto& [key, e] : entries_) {
    v1::CacheEntry* out = report.add_entries();
    *out = e;
    auto it = in_use_.find(key);
    out->set_in_use(it == in_use_.end() ? 0 : it->second);
  }
  return report;
}

uint64_t FeatureCache::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

}  // namespace nightshift
