#include "common/model_folder.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "common/io/atomic_file.h"
#include "common/format/json_depth.h"
#include "common/crypto/sha256.h"

namespace fs = std::filesystem;

namespace nightshift {
namespace {

constexpr uint64_t kMaxChecksumsBytes = 16 << 20;  // a listing, not weights

StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// SHA-1 only for folders written before SHA-256 (OpenSSL: the daemons link it anyway).
StatusOr<std::string> Sha1OfFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha1(), nullptr);
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return Status::IOError("cannot read " + path);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  return crypto::ToHex(md, n);
}

// The file's digest by checksums.json's algorithm (ParseChecksums admits sha256 and sha1).
StatusOr<std::string> DigestOfFile(const std::string& path, const std::string& algorithm) {
  if (algorithm == "sha1") return Sha1OfFile(path);
  std::string hex;
  if (std::string err = crypto::Sha256OfFile(path, &hex); !err.empty()) return Status::IOError(err);
  return hex;
}

size_t DigestHexLength(const std::string& algorithm) { return algorithm == "sha1" ? 40 : 64; }

// What Sha1OfFile and crypto::Sha256OfFile give: the digest in lower-case hex.
bool IsDigest(const std::string& hex, const std::string& algorithm) {
  return crypto::IsLowerHex(hex, DigestHexLength(algorithm));
}

}  // namespace

StatusOr<ModelChecksums> ParseChecksums(const std::string& text) {
  using nlohmann::json;
  if (!format::JsonDepthWithin(text))
    return Status::Corruption(std::string(kChecksumsFile) + " nests deeper than " +
                              std::to_string(format::kMaxJsonDepth) + " levels");
  json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption(std::string(kChecksumsFile) + " is not a JSON object");
  // j.value() would throw on an algorithm that is not a string.
  const auto algo = j.find("algorithm");
  const std::string algorithm = algo != j.end() && algo->is_string() ? algo->get<std::string>() : "";
  if (algorithm != kChecksumAlgorithm && algorithm != "sha1")
    return Status::Corruption(std::string(kChecksumsFile) + ": algorithm " + (algo != j.end() ? algo->dump() : "(none)") +
                              " is neither \"sha256\" nor \"sha1\"");
  if (!j.contains("files") || !j["files"].is_object())
    return Status::Corruption(std::string(kChecksumsFile) + ": \"files\" must be an object");
  ModelChecksums out;
  for (const auto& [name, f] : j["files"].items()) {
    if (!IsPlainFileName(name) || name == kChecksumsFile)
      return Status::Corruption(std::string(kChecksumsFile) + ": '" + name + "' is not a plain file name");
    if (!f.is_object() || !f.contains("bytes") || !f["bytes"].is_number_integer() || !f.contains(algorithm) ||
        !f[algorithm].is_string())
      return Status::Corruption(std::string(kChecksumsFile) + ": " + name + " needs \"bytes\" and \"" + algorithm +
                                "\"");
    // A size below 0 (or past 2^63, which int64 would wrap to one) is no file's.
    const json& bytes = f["bytes"];
    if (!bytes.is_number_unsigned() || bytes.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return Status::Corruption(std::string(kChecksumsFile) + ": " + name + ": bytes " + bytes.dump() +
                                " is not a file size");
    const std::string hex = f[algorithm].get<std::string>();
    if (!IsDigest(hex, algorithm))
      return Status::Corruption(std::string(kChecksumsFile) + ": " + name + ": " + algorithm + " \"" + hex +
                                "\" is not " + std::to_string(DigestHexLength(algorithm)) + " lower-case hex digits");
    out[name] = {static_cast<int64_t>(bytes.get<uint64_t>()), algorithm, hex};
  }
  return out;
}

Status WriteChecksums(const std::string& dir) {
  nlohmann::json files = nlohmann::json::object();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kChecksumsFile || !e.is_regular_file()) continue;
    std::string hex;
    if (std::string err = crypto::Sha256OfFile(e.path().string(), &hex); !err.empty()) return Status::IOError(err);
    files[name] = {{"bytes", static_cast<int64_t>(e.file_size())}, {kChecksumAlgorithm, hex}};
  }
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  nlohmann::json j = {{"algorithm", kChecksumAlgorithm}, {"files", files}};
  std::string err = io::WriteFileAtomically(dir + "/" + kChecksumsFile, j.dump(2));
  return err.empty() ? Status::OK() : Status::IOError(err);
}

Status VerifyModelFolder(const std::string& dir) {
  auto text = ReadWhole(dir + "/" + kChecksumsFile);
  if (!text.ok()) return Status::Corruption(std::string(kChecksumsFile) + " missing in " + dir);
  auto sums = ParseChecksums(text.value());
  if (!sums.ok()) return sums.status();
  for (const auto& [name, want] : sums.value()) {
    const std::string path = dir + "/" + name;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return Status::Corruption(name + ": missing");
    if (static_cast<int64_t>(size) != want.bytes)
      return Status::Corruption(name + ": " + std::to_string(size) + " bytes, checksums.json says " +
                                std::to_string(want.bytes));
    auto digest = DigestOfFile(path, want.algorithm);
    if (!digest.ok()) return digest.status();
    if (digest.value() != want.hex)
      return Status::Corruption(name + ": " + want.algorithm + " " + digest.value() + ", checksums.json says " +
                                want.hex);
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != kChecksumsFile && !sums->count(name)) return Status::Corruption(name + ": not in checksums.json");
  }
  return Status::OK();
}

std::string ModelStepFolderName(int64_t step) { return "model-step-" + std::to_string(step); }

int64_t ModelFolderStep(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  const auto config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto step = config.is_object() ? config.find("step") : config.end();
  return step != config.end() && step->is_number_integer() ? step->get<int64_t>() : -1;
}

Status SendModelFolder(const std::string& dir, const std::string& beneath, int64_t step,
                       const std::function<bool(const v1::ArtifactChunk&)>& write) {
  std::string text;
  if (const std::string error = io::ReadFileBeneath({beneath}, dir + "/" + kChecksumsFile, kMaxChecksumsBytes, &text);
      !error.empty())
    return Status::NotFound("no model folder at " + dir + " (" + error + ")");
  auto sums = ParseChecksums(text);
  if (!sums.ok()) return sums.status();
  v1::ArtifactChunk first;
  first.set_checksums_json(text);
  first.set_step(step);
  if (!write(first)) return Status::Cancelled("reader left");
  for (const auto& [name, sum] : sums.value()) {
    const std::string path = dir + "/" + name;
    // Regular files only, never through a link out of the job's folder.
    if (!fs::is_regular_file(path)) return Status::Corruption(name + " in " + dir + " is not a regular file");
    NS_RETURN_IF_ERROR(SendFileBeneath(beneath, path, name, write));
  }
  return Status::OK();
}

Status SendFileBeneath(const std::string& beneath, const std::string& path, const std::string& name,
                       const std::function<bool(const v1::ArtifactChunk&)>& write) {
  int64_t offset = 0;
  v1::ArtifactChunk chunk;
  chunk.set_file(name);
  struct ReaderLeft {};
  std::string error;
  try {
    error = io::ScanFileBeneath({beneath}, path, UINT64_MAX, [&](std::string_view piece) {
      chunk.set_offset(offset);
      chunk.set_data(piece.data(), piece.size());
      if (!write(chunk)) throw ReaderLeft{};  // the rest of the file is not read
      offset += static_cast<int64_t>(piece.size());
    });
  } catch (const ReaderLeft&) {
    return Status::Cancelled("reader left");
  }
  if (!error.empty()) return Status::IOError(error);
  if (offset == 0) {  // an empty file: one chunk says so
    chunk.set_offset(0);
    chunk.clear_data();
    if (!write(chunk)) return Status::Cancelled("reader left");
  }
  return Status::OK();
}

}  // namespace nightshift
