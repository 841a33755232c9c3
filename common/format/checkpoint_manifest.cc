#include "common/format/checkpoint_manifest.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "common/format/checkpoint_layout.h"
#include "common/format/json_depth.h"
#include "common/format/shard.h"

namespace nightshift::format {

using nlohmann::json;

bool IsPlainFileName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (unsigned char c : name)
    if (c == '/' || c == '\\' || c < 0x20 || c == 0x7f) return false;
  return true;
}

void FileHasher::Update(const char* data, size_t n) {
  sha_.Update(std::string_view(data, n));
  fnv_ = StableHash64(data, n, fnv_);
  bytes_ += n;
}

ManifestFile FileHasher::Entry() { return {bytes_, sha_.HexDigest(), fnv_}; }

ManifestFile FileEntry(const std::string& bytes) {
  FileHasher h;
  h.Update(bytes.data(), bytes.size());
  return h.Entry();
}

std::string ManifestText(const CheckpointManifest& m) {
  json files = json::object();
  for (const auto& [name, f] : m.files)
    files[name] = f.sha256.empty() ? json{{"bytes", f.bytes}, {"fnv1a64", std::to_string(f.fnv1a64)}}
                                   : json{{"bytes", f.bytes}, {"sha256", f.sha256}};
  json doc = {{"magic", kCheckpointMagic},
              {"version", m.version},
              {"position", m.position},
              {"fingerprint", m.fingerprint},
              {"files", files}};
  if (m.attempt >= 0) doc["attempt"] = m.attempt;
  if (m.best_step > 0) doc["best"] = {{"step", m.best_step}, {"manifest_sha256", m.best_manifest_sha256}};
  return doc.dump(2) + "\n";
}

namespace {

// A decimal uint64 written as a JSON string (JSON numbers lose bits past 2^53).
bool ParseDecimal(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20 || s[0] < '0' || s[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

// Whether the JSON integer `v` is in [min, INT_MAX] (get<int> would cut it otherwise).
bool FitsInt(const json& v, int64_t min) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max());
  return v.get<int64_t>() >= min && v.get<int64_t>() <= std::numeric_limits<int>::max();
}

std::string ParseFiles(const json& files, std::map<std::string, ManifestFile>* out) {
  if (!files.is_object()) return "manifest.json: \"files\" is not an object";
  for (const auto& [name, f] : files.items()) {
    if (!IsPlainFileName(name) || name == kCheckpointComplete || name == kCheckpointManifest)
      return "manifest.json lists a file named \"" + name + "\"";
    ManifestFile entry;
    if (!f.is_object() || !f.contains("bytes") || !f["bytes"].is_number_unsigned())
      return "manifest.json: " + name + " has no bytes";
    entry.bytes = f["bytes"].get<uint64_t>();
    if (f.contains("sha256")) {
      if (!f["sha256"].is_string() || !crypto::IsLowerHex(f["sha256"].get<std::string>(), 64))
        return "manifest.json: " + name + "'s sha256 is not 64 lower-case hex digits";
      entry.sha256 = f["sha256"].get<std::string>();
    } else if (!f.contains("fnv1a64") || !f["fnv1a64"].is_string() ||
               !ParseDecimal(f["fnv1a64"].get<std::string>(), &entry.fnv1a64)) {
      return "manifest.json: " + name + " has no sha256 (or fnv1a64)";
    }
    (*out)[name] = entry;
  }
  return "";
}

}  // namespace

std::string ParseManifest(const std::string& text, CheckpointManifest* out) {
  if (!JsonDepthWithin(text)) return "manifest.json nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return "manifest.json is not a JSON object";
  if (doc.value("magic", json()) != kCheckpointMagic) return "manifest.json is not a nightshift-checkpoint";
  CheckpointManifest m;
  const json& version = doc.contains("version") ? doc["version"] : json(0);  // 0: refused by every reader
  if (!version.is_number_integer()) return "manifest.json: version is not an integer";
  if (!FitsInt(version, 0)) return "manifest.json: version " + version.dump() + " is not a version number";
  m.version = version.get<int>();
  const json& attempt = doc.contains("attempt") ? doc["attempt"] : json(-1);
  if (doc.contains("attempt") && attempt.is_number_integer()) {
    // Cut to an int, a huge attempt would wrap to a small or a negative (absent) one and
    // slip past the fence that refuses older attempts.
    if (!FitsInt(attempt, 0)) return "manifest.json: attempt " + attempt.dump() + " is not an attempt number";
    m.attempt = attempt.get<int>();
  }
  // A later version may have changed every other field: its version (and attempt, for
  // fencing) is all a reader needs to refuse it, never to mistake it for damage.
  if (m.version > kCheckpointVersion) {
    *out = std::move(m);
    return "";
  }
  if (!attempt.is_number_integer()) return "manifest.json: attempt is not an integer";
  m.position = m.version == 1 ? doc : doc.value("position", json());
  const json& fingerprint = doc.contains("fingerprint") ? doc["fingerprint"] : json("");
  if (!fingerprint.is_string()) return "manifest.json: fingerprint is not a string";
  m.fingerprint = fingerprint.get<std::string>();
  if (doc.contains("files"))
    if (std::string err = ParseFiles(doc["files"], &m.files); !err.empty()) return err;
  if (doc.contains("best")) {
    const json& best = doc["best"];
    const json step = best.is_object() ? best.value("step", json()) : json();
    const json sha = best.is_object() ? best.value("manifest_sha256", json()) : json();
    if (!step.is_number_integer() || step.get<int64_t>() <= 0 || !sha.is_string() || !crypto::IsLowerHex(sha.get<std::string>(), 64))
      return "manifest.json: best is not {\"step\": a positive step, \"manifest_sha256\": 64 lower-case hex digits}";
    m.best_step = step.get<int64_t>();
    m.best_manifest_sha256 = sha.get<std::string>();
  }
  *out = std::move(m);
  return "";
}

std::string ReadManifest(const std::string& step_dir, CheckpointManifest* out) {
  const std::string path = step_dir + "/" + kCheckpointManifest;
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read " + path;
  std::ostringstream text;
  text << in.rdbuf();
  if (std::string err = ParseManifest(text.str(), out); !err.empty()) return step_dir + "/" + err;
  return "";
}

std::string VerifyFile(const std::string& name, const ManifestFile& got, const ManifestFile& want) {
  if (got.bytes != want.bytes)
    return name + " is truncated (" + std::to_string(got.bytes) + " of " + std::to_string(want.bytes) + " bytes)";
  const bool same = want.sha256.empty() ? got.fnv1a64 == want.fnv1a64 : got.sha256 == want.sha256;
  if (!same) return name + " does not match its checksum in manifest.json";
  return "";
}

std::string VerifyFiles(const std::string& step_dir, const CheckpointManifest& m) {
  std::vector<char> buf(1 << 20);
  for (const auto& [name, want] : m.files) {
    const std::string path = step_dir + "/" + name;
    std::ifstream in(path, std::ios::binary);
    if (!in) return "cannot read " + path;
    FileHasher hasher;
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      hasher.Update(buf.data(), static_cast<size_t>(in.gcount()));
    }
    if (std::string err = VerifyFile(path, hasher.Entry(), want); !err.empty()) return err;
  }
  return "";
}

}  // namespace nightshift::format
