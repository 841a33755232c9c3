#include "common/format/progress.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace nightshift::format {
namespace {

void AppendQuoted(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  std::string Parse(ProgressRecord* r) {
    SkipSpace();
    if (!Eat('{')) return Fail("expected '{'");
    SkipSpace();
    if (Eat('}')) return Finish(r);
    while (true) {
      SkipSpace();
      std::string key;
      if (!ParseString(&key)) return Fail("expected a quoted key");
      SkipSpace();
      if (!Eat(':')) return Fail("expected ':' after key \"" + key + "\"");
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == '"') {
        std::string value;
        if (!ParseString(&value)) return Fail("bad string value for \"" + key + "\"");
        if (key == "event") r->event = value; else r->strings[key] = value;
      } else if (s_.compare(pos_, 4, "null") == 0) {
        pos_ += 4;
        r->numbers[key] = std::numeric_limits<double>::quiet_NaN();
      } else {
        double v;
        if (!ParseNumber(&v)) return Fail("bad number for \"" + key + "\"");
        r->numbers[key] = v;
      }
      SkipSpace();
      if (Eat(',')) continue;
      if (Eat('}')) return Finish(r);
      return Fail("expected ',' or '}'");
    }
  }

 private:
  std::string Finish(ProgressRecord* r) {
    SkipSpace();
    if (pos_ != s_.size()) return Fail("trailing characters after the object");
    if (r->event.empty()) return "progress line has no \"event\"";
    return "";
  }
  std::string Fail(const std::string& what) {
    return "bad progress line at column " + std::to_string(pos_ + 1) + ": " + what;
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) { ++pos_; return true; }
    return false;
  }
  bool ParseString(std::string* out) {
    if (!Eat('"')) return false;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') { out->push_back(c); continue; }
      if (pos_ >= s_.size()) return false;
      char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return false;
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            char h = s_[pos_++];
            code <<= 4;
            if (h >= '0' && h <= '9') code |= h - '0';
            else if (h >= 'a' && h <= 'f') code |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') code |= h - 'A' + 10;
            else return false;
          }
          // Only the control characters we write ourselves; others become '?'.
          out->push_back(code < 0x80 ? static_cast<char>(code) : '?');
          break;
        }
        default: return false;
      }
    }
    return false;
  }
  bool ParseNumber(double* v) {
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
                                s_[pos_] == '-' || s_[pos_] == '+' || s_[pos_] == '.' ||
                                s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
    }
    if (pos_ == start) return false;
    std::string num = s_.substr(start, pos_ - start);
    char* end = nullptr;
    *v = std::strtod(num.c_str(), &end);
    return end == num.c_str() + num.size();
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

std::string FormatProgressLine(const ProgressRecord& record) {
  std::string out = "{\"event\":";
  AppendQuoted(record.event, &out);
  for (const auto& [key, value] : record.numbers) {
    out += ',';
    AppendQuoted(key, &out);
    out += ':';
    if (!std::isfinite(value)) {
      out += "null";
      continue;
    }
    char buf[32];
    if (value == std::floor(value) && std::fabs(value) < 9e15) {
      std::snprintf(buf, sizeof(buf), "%.0f", value);
    } else {
      std::snprintf(buf, sizeof(buf), "%.9g", value);
    }
    out += buf;
  }
  for (const auto& [key, value] : record.strings) {
    out += ',';
    AppendQuoted(key, &out);
    out += ':';
    AppendQuoted(value, &out);
  }
  out += '}';
  return out;
}

std::string ParseProgressLine(const std::string& line, ProgressRecord* record) {
  *record = ProgressRecord();
  return Parser(line).Parse(record);
}

}  // namespace nightshift::format
