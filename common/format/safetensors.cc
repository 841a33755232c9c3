#include "common/format/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/format/json_depth.h"

namespace nightshift::format {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeader = 100000000;  // the reference's limit

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {{DType::kF64, "F64", 8}, {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
                                 {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
                                 {DType::kI16, "I16", 2}, {DType::kI8, "I8", 1}, {DType::kU8, "U8", 1},
                                 {DType::kBool, "BOOL", 1}};

// The header length N of a file's first 8 bytes (little-endian).
uint64_t HeaderLength(std::string_view head) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[i]);
  return n;
}

bool HeaderFits(uint64_t n, uint64_t file_size) { return n <= kMaxHeader && n <= file_size - 8; }

std::string ParseTensor(const std::string& name, const json& info, uint64_t data_start, SafetensorsTensor* t) {
  if (!info.is_object()) return name + ": not an object";
  t->name = name;
  if (!info.contains("dtype") || !info["dtype"].is_string() || !ParseDType(info["dtype"].get<std::string>(), &t->dtype))
    return name + ": dtype " + info.value("dtype", json()).dump() + " is not one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL";
  const json shape = info.value("shape", json());
  const json offsets = info.value("data_offsets", json());
  if (!shape.is_array()) return name + ": no shape";
  uint64_t bytes = DTypeSize(t->dtype);
  for (const json& d : shape) {
    if (!d.is_number_unsigned()) return name + ": shape " + shape.dump() + " is not a list of sizes";
    const uint64_t n = d.get<uint64_t>();
    if (n != 0 && bytes > std::numeric_limits<uint64_t>::max() / n) return name + ": shape " + shape.dump() + " overflows";
    bytes *= n;
    t->shape.push_back(static_cast<int64_t>(n));
  }
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
    return name + ": data_offsets " + offsets.dump() + " is not [begin, end]";
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (end < begin) return name + ": data_offsets " + offsets.dump() + " end before they begin";
  if (end - begin != bytes)
    return name + ": data_offsets " + offsets.dump() + " hold " + std::to_string(end - begin) + " bytes, its " +
           DTypeName(t->dtype) + " shape " + shape.dump() + " needs " + std::to_string(bytes);
  t->begin = data_start + begin;
  t->end = data_start + end;
  return "";
}

}  // namespace

bool ParseDType(const std::string& name, DType* out) {
  for (const DTypeInfo& d : kDTypes)
    if (name == d.name) {
      *out = d.dtype;
      return true;
    }
  return false;
}

const char* DTypeName(DType dtype) {
  for (const DTypeInfo& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

size_t DTypeSize(DType dtype) {
  for (const DTypeInfo& d : kDTypes)
    if (d.dtype == dtype) return d.size;
  return 0;
}

std::string ParseSafetensorsHeader(std::string_view head, uint64_t file_size, SafetensorsHeader* out) {
  if (head.size() < 8 || file_size < 8) return "shorter than a safetensors header (8 bytes)";
  const uint64_t n = HeaderLength(head);
  if (!HeaderFits(n, file_size)) return "header length " + std::to_string(n) + " is beyond the file";
  if (head.size() < 8 + n) return "header cut short";
  if (!JsonDepthWithin(head.substr(8, n)))
    return "header nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
  const json doc = json::parse(head.substr(8, n), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return "header is not a JSON object";
  SafetensorsHeader h;
  h.data_start = 8 + n;
  for (const auto& [name, info] : doc.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return "__metadata__ is not an object";
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) return "__metadata__." + key + " is not a string";
        h.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    h.tensors.emplace_back();
    if (std::string e = ParseTensor(name, info, h.data_start, &h.tensors.back()); !e.empty()) return e;
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  uint64_t at = h.data_start;  // the tensors cover the data exactly
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin != at) return t.name + ": its data starts at " + std::to_string(t.begin - h.data_start) +
                              ", not where the tensor before it ends (" + std::to_string(at - h.data_start) + ")";
    at = t.end;
  }
  if (at != file_size)
    return "the tensors cover " + std::to_string(at - h.data_start) + " bytes of data, the file holds " +
           std::to_string(file_size - h.data_start);
  *out = std::move(h);
  return "";
}

std::string ReadSafetensorsHeader(int fd, const std::string& path, SafetensorsHeader* out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return path + ": not a regular file";
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto read_at = [fd](char* to, uint64_t n, uint64_t at) {
    for (uint64_t done = 0; done < n;) {
      const ssize_t got = ::pread(fd, to + done, n - done, static_cast<off_t>(at + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      done += static_cast<uint64_t>(got);
    }
    return true;
  };
  std::string head(8, '\0');
  if (!read_at(head.data(), 8, 0)) return path + ": shorter than a safetensors header (8 bytes)";
  const uint64_t n = HeaderLength(head);
  if (HeaderFits(n, size)) {  // else ParseSafetensorsHeader says why
    head.resize(8 + n);
    if (!read_at(head.data() + 8, n, 8)) return path + ": cannot be read";
  }
  std::string e = ParseSafetensorsHeader(head, size, out);
  return e.empty() ? "" : path + ": " + e;
}

std::string ReadSafetensorsHeader(const std::string& path, SafetensorsHeader* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return path + ": cannot be read";
  std::string e = ReadSafetensorsHeader(fd, path, out);
  ::close(fd);
  return e;
}

std::string SafetensorsHeaderBytes(std::vector<SafetensorsTensor>* tensors,
                                   const std::map<std::string, std::string>& metadata) {
  json doc = json::object();
  if (!metadata.empty()) doc["__metadata__"] = metadata;
  uint64_t offset = 0;  // each tensor's begin and end, in the data, until the header's size is known
  for (SafetensorsTensor& t : *tensors) {
    uint64_t bytes = DTypeSize(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    t.begin = offset;
    t.end = offset += bytes;
    doc[t.name] = {{"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = doc.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-aligned
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);  // little-endian
  out += text;
  for (SafetensorsTensor& t : *tensors) {  // now offsets in the file
    t.begin += out.size();
    t.end += out.size();
  }
  return out;
}

std::string ParseSafetensorsIndex(const std::string& text, const std::string& path,
                                  std::map<std::string, std::string>* weight_map) {
  if (!JsonDepthWithin(text)) return path + ": nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object())
    return path + ": no weight_map object";
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : doc["weight_map"].items()) {
    if (!file.is_string()) return path + ": weight_map." + name + " is not a file name";
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      return path + ": weight_map." + name + " names '" + f + "', not a file beside the index";
    map[name] = f;
  }
  *weight_map = std::move(map);
  return "";
}

std::string ReadSafetensorsIndex(const std::string& path, std::map<std::string, std::string>* weight_map) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return path + ": cannot be read";
  std::ostringstream text;
  text << in.rdbuf();
  return ParseSafetensorsIndex(text.str(), path, weight_map);
}

}  // namespace nightshift::format
