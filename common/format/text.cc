#include "common/format/text.h"

namespace nightshift::format {

std::string CleanText(const std::string& raw, size_t max_bytes) {
  const size_t size = raw.size() < max_bytes ? raw.size() : max_bytes;
  std::string out;
  out.reserve(size);
  size_t i = 0;
  while (i < size) {
    const unsigned char c = raw[i];
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= size;
    for (int k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(raw[i + k]) >> 6) == 2;
    if (ok && c != 0) {
      out.append(raw, i, n);
      i += n;
    } else {
      out.push_back('?');
      ++i;
    }
  }
  for (char& ch : out)
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  return out;
}

}  // namespace nightshift::format
