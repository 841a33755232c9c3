// The safetensors layout (Hugging Face's weights format): an 8-byte little-endian header
// length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {string: string}}, then the data; offsets count from the data's start.
// Every offset, dtype and size is checked against the file before any data is read, as
// the reference library checks them (the tensors cover the data exactly, in some order,
// with no hole and no overlap), so a header that lies is an error naming the tensor and
// a reader can map the file and take each tensor where the header says.
//
// Also model.safetensors.index.json, which names the shard of each tensor of a sharded
// folder. Standard library and nlohmann-json only (the trainer and the worker read them).
#ifndef NIGHTSHIFT_COMMON_FORMAT_SAFETENSORS_H_
#define NIGHTSHIFT_COMMON_FORMAT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace nightshift::format {

// The dtypes a header may name; Size() is the bytes of one element.
enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };
bool ParseDType(const std::string& name, DType* out);  // "F32" -> kF32
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // offsets in the file (the header's plus the data's start)
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // in the order of their data
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N
};

// The header of a file of `file_size` bytes that starts with `head` (at least its first
// 8 + N bytes). "" or what is wrong, naming the tensor or the key.
std::string ParseSafetensorsHeader(std::string_view head, uint64_t file_size, SafetensorsHeader* out);
// The same read from the open file `fd` (its header only; the descriptor stays open and
// its offset is not used), `path` naming it in messages, which start with the path.
std::string ReadSafetensorsHeader(int fd, const std::string& path, SafetensorsHeader* out);
// The same read from `path`.
std::string ReadSafetensorsHeader(const std::string& path, SafetensorsHeader* out);

// The bytes before the data of a file holding `tensors` (their begin/end are set here, in
// order, with no gaps), padded with spaces so that the data starts 8-aligned.
std::string SafetensorsHeaderBytes(std::vector<SafetensorsTensor>* tensors,
                                   const std::map<std::string, std::string>& metadata);

// model.safetensors.index.json: its weight_map, tensor name -> shard file (a plain file
// name, in the index's folder), from the index's `text` read from `path`. Messages start
// with the path.
std::string ParseSafetensorsIndex(const std::string& text, const std::string& path,
                                  std::map<std::string, std::string>* weight_map);
// The same read from `path`.
std::string ReadSafetensorsIndex(const std::string& path, std::map<std::string, std::string>* weight_map);

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_SAFETENSORS_H_
