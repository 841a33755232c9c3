// SHA-256 (FIPS 180-4), the checksum of every model folder we write (checksums.json) and
// of the coordinator's tokens. Here, in the dependency-free formats, because the trainer
// writes and verifies model folders and links LibTorch only (no OpenSSL on a GPU node).
#ifndef NIGHTSHIFT_COMMON_CRYPTO_SHA256_H_
#define NIGHTSHIFT_COMMON_CRYPTO_SHA256_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace nightshift::crypto {

// The "algorithm" of every checksums.json we write (model folders: worker/trainer/checkpoint/export.h,
// common/model_folder.h); readers accept "sha1" as well, which folders written before held.
inline constexpr char kChecksumAlgorithm[] = "sha256";

// Incremental: Update any number of times, then HexDigest once.
class Sha256 {
 public:
  Sha256();
  void Update(std::string_view bytes);
  std::array<unsigned char, 32> Digest();  // the 32 bytes; call once
  std::string HexDigest();  // lower-case hex, 64 digits; instead of Digest

 private:
  void Block(const unsigned char* block);  // one 64-byte block into state_
  std::array<uint32_t, 8> state_;
  std::array<unsigned char, 64> pending_{};  // bytes not yet a whole block
  size_t pending_size_ = 0;
  uint64_t total_bytes_ = 0;
};

// SHA-256 of `bytes`, lower-case hex.
std::string Sha256Hex(std::string_view bytes);

// `n` bytes as 2n lower-case hex digits (how every digest and key here is written).
std::string ToHex(const unsigned char* bytes, size_t n);

// Whether `s` is exactly `digits` lower-case hex digits (a digest as ToHex writes it).
bool IsLowerHex(std::string_view s, size_t digits);

// HMAC-SHA256 (RFC 2104) of `message` under `key`, lower-case hex: the capabilities the
// coordinator hands out for a worker's file service (worker/file_service.h).
std::string HmacSha256Hex(std::string_view key, std::string_view message);

// Whether two strings are equal, in a time that does not depend on where they differ
// (for comparing secrets).
bool ConstantTimeEqual(std::string_view a, std::string_view b);

// SHA-256 of the file at `path` (read in 1 MiB pieces) into *hex; returns "" or a message
// naming the file.
std::string Sha256OfFile(const std::string& path, std::string* hex);

}  // namespace nightshift::crypto

#endif  // NIGHTSHIFT_COMMON_CRYPTO_SHA256_H_
