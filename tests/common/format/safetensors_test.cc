#include "common/format/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace nightshift::format {
namespace {

// A file's bytes from a hand-written header (data: `data_bytes` zero bytes).
std::string FileWith(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

std::string Parse(const std::string& file, SafetensorsHeader* h = nullptr) {
  SafetensorsHeader ignored;
  return ParseSafetensorsHeader(file, file.size(), h != nullptr ? h : &ignored);
}

TEST(SafetensorsTest, WrittenHeadersReadBack) {
  std::vector<SafetensorsTensor> tensors = {{"b.weight", DType::kBF16, {3, 2}}, {"a.bias", DType::kF32, {5}},
                                            {"scalar", DType::kF16, {}}, {"empty", DType::kI64, {0, 4}}};
  const std::string head = SafetensorsHeaderBytes(&tensors, {{"format", "pt"}});
  EXPECT_EQ(head.size() % 8, 0u);  // the data starts 8-aligned
  EXPECT_EQ(tensors[0].begin, head.size());
  EXPECT_EQ(tensors[1].begin, head.size() + 12);
  EXPECT_EQ(tensors[3].end, head.size() + 12 + 20 + 2);
  SafetensorsHeader h;
  ASSERT_EQ(Parse(head + std::string(34, '\0'), &h), "");
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_EQ(h.data_start, head.size());
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.tensors[0].name, "b.weight");  // in the order of their data
  EXPECT_EQ(h.tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(h.tensors[1].name, "a.bias");
  EXPECT_EQ(h.tensors[2].shape, std::vector<int64_t>{});
  EXPECT_EQ(h.tensors[3].begin, h.tensors[3].end);
}

// What the reference library refuses, refused naming the tensor or the part.
TEST(SafetensorsTest, AHeaderThatLiesIsRefusedNamingTheTensor) {
  const auto one = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"w": {"dtype": ")" + dtype + R"(", "shape": )" + shape + R"(, "data_offsets": )" + offsets + "}}";
  };
  EXPECT_EQ(Parse(FileWith(one("F32", "[2, 2]", "[0, 16]"), 16)), "");
  EXPECT_EQ(Parse(FileWith(one("F32", "[2, 2]", "[0, 12]"), 12)),
            "w: data_offsets [0,12] hold 12 bytes, its F32 shape [2,2] needs 16");
  EXPECT_EQ(Parse(FileWith(one("F32", "[2, 2]", "[0, 16]"), 8)), "the tensors cover 16 bytes of data, the file holds 8");
  EXPECT_EQ(Parse(FileWith(one("F32", "[2, 2]", "[0, 16]"), 20)), "the tensors cover 16 bytes of data, the file holds 20");
  EXPECT_EQ(Parse(FileWith(one("F8", "[2]", "[0, 2]"), 2)),
            "w: dtype \"F8\" is not one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL");
  EXPECT_EQ(Parse(FileWith(one("F32", "[-1]", "[0, 4]"), 4)), "w: shape [-1] is not a list of sizes");
  EXPECT_EQ(Parse(FileWith(one("F32", "[1]", "[8, 4]"), 8)), "w: data_offsets [8,4] end before they begin");
  EXPECT_EQ(Parse(FileWith(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                               "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}})", 3)),
            "b: its data starts at 1, not where the tensor before it ends (2)");
  EXPECT_EQ(Parse(FileWith(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})", 4)),
            "a: its data starts at 2, not where the tensor before it ends (0)");
  EXPECT_EQ(Parse(FileWith(R"({"__metadata__": {"n": 1}})", 0)), "__metadata__.n is not a string");
  EXPECT_EQ(Parse(FileWith("[1, 2]", 0)), "header is not a JSON object");
  std::string too_long = FileWith("{}", 0);
  too_long[0] = 100;
  EXPECT_EQ(Parse(too_long), "header length 100 is beyond the file");
  EXPECT_EQ(Parse("abc"), "shorter than a safetensors header (8 bytes)");
}

TEST(SafetensorsTest, FilesAndTheIndexOfAShardedFolder) {
  const std::string dir = testing::TempDir();
  std::vector<SafetensorsTensor> tensors = {{"w", DType::kF16, {2}}};
  std::ofstream(dir + "/one.safetensors", std::ios::binary) << SafetensorsHeaderBytes(&tensors, {}) << std::string(4, '\1');
  SafetensorsHeader h;
  ASSERT_EQ(ReadSafetensorsHeader(dir + "/one.safetensors", &h), "");
  EXPECT_EQ(h.tensors.at(0).end - h.tensors.at(0).begin, 4u);
  EXPECT_EQ(ReadSafetensorsHeader(dir + "/none.safetensors", &h), dir + "/none.safetensors: cannot be read");

  std::ofstream(dir + "/index.json") << R"({"metadata": {"total_size": 8},
      "weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}})";
  std::map<std::string, std::string> map;
  ASSERT_EQ(ReadSafetensorsIndex(dir + "/index.json", &map), "");
  EXPECT_EQ(map.at("b.weight"), "model-00002-of-00002.safetensors");
  std::ofstream(dir + "/bad.json") << R"({"weight_map": {"a.weight": "../../etc/passwd"}})";
  EXPECT_EQ(ReadSafetensorsIndex(dir + "/bad.json", &map),
            dir + "/bad.json: weight_map.a.weight names '../../etc/passwd', not a file beside the index");
}

// A header may be 100 MB: nested 200,000 deep (400 KB of brackets) it overflowed the stack
// where the parsed value was copied (safetensors_fuzz, run on that input). Refused at
// serde_json's depth, as the reference refuses it; the index too.
TEST(SafetensorsTest, AHeaderNestedBeyondTheReferencesDepthIsRefusedNotACrash) {
  const int deep = 200000;
  const std::string shape = std::string(deep, '[') + std::string(deep, ']');
  EXPECT_EQ(Parse(FileWith(R"({"t": {"dtype": "F32", "shape": )" + shape + R"(, "data_offsets": [0, 0]}})", 0)),
            "header nests deeper than 128 levels");
  const std::string at_limit = std::string(126, '[') + std::string(126, ']');  // 128 with the two objects
  EXPECT_EQ(Parse(FileWith(R"({"t": {"dtype": "F32", "shape": )" + at_limit + R"(, "data_offsets": [0, 0]}})", 0)),
            "t: shape " + at_limit + " is not a list of sizes");
  const std::string dir = testing::TempDir();
  std::ofstream(dir + "/deep-index.json") << R"({"weight_map": {"a": )" + shape + "}}";
  std::map<std::string, std::string> map;
  EXPECT_EQ(ReadSafetensorsIndex(dir + "/deep-index.json", &map), dir + "/deep-index.json: nests deeper than 128 levels");
}

}  // namespace
}  // namespace nightshift::format
