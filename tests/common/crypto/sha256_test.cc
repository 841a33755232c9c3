#include "common/crypto/sha256.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace nightshift::crypto {
namespace {

// FIPS 180-4's examples and the padding's edges (55, 56, 63, 64 bytes: one or two final blocks).
TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(Sha256Hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(Sha256Hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PiecesAndFilesGiveTheWholesDigest) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += static_cast<char>(i * 7);
  Sha256 h;
  for (size_t at = 0, n = 1; at < text.size(); at += n, n = n * 3 % 97 + 1) h.Update(text.substr(at, n));
  EXPECT_EQ(h.HexDigest(), Sha256Hex(text));
  const std::string path = (std::filesystem::temp_directory_path() / "nightshift-sha256-test").string();
  std::ofstream(path, std::ios::binary) << text;
  std::string hex;
  ASSERT_EQ(Sha256OfFile(path, &hex), "");
  EXPECT_EQ(hex, Sha256Hex(text));
  std::filesystem::remove(path);
  EXPECT_NE(Sha256OfFile(path, &hex).find(path), std::string::npos);
}

}  // namespace

// RFC 4231 test cases 1, 2 and 6 (a key longer than the block is hashed first).
TEST(Sha256Test, HmacEqualsRfc4231) {
  EXPECT_EQ(HmacSha256Hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(HmacSha256Hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Sha256Test, ConstantTimeEqualComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "ab"));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
}

}  // namespace nightshift::crypto
