#include "cli/format.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

namespace nightshift::cli {

std::string Sprintf(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(n > 0 ? n : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}


std::string Duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "-";
  int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%dh%02dm", s / 3600, (s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof(buf), "%dm%02ds", s / 60, s % 60);
  else std::snprintf(buf, sizeof(buf), "%ds", s);
  return buf;
}

std::string UtcTime(int64_t seconds) {
  time_t t = seconds;
  std::tm tm;
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return ts;
}

std::string ProgressLine(const v1::Job& job) {
  const v1::Progress& p = job.progress();
  std::ostringstream os;
  const int width = 24;
  double frac = p.total_steps() > 0 ? std::min(1.0, double(p.step()) / p.total_steps()) : 0;
  int filled = static_cast<int>(frac * width);
  os << "[" << std::string(filled, '#') << std::string(width - filled, '.') << "] "
     << static_cast<int>(frac * 100) << "% step " << p.step() << "/" << p.total_steps() << " epoch "
     << p.epoch();
  os << Sprintf(" loss %.4f %.0f tok/s", p.loss(), p.tokens_per_second());
  if (p.host_rss_bytes() > 0) os << " rss " << p.host_rss_bytes() / (1 << 20) << " MiB";
  os << " ETA " << Duration(p.eta_seconds());
  return os.str();
}

std::string MetricLines(const google::protobuf::Map<std::string, double>& metrics) {
  std::string out;
  for (const auto& [k, v] : std::map<std::string, double>(metrics.begin(), metrics.end()))
    out += Sprintf("  %-20s %.4f\n", k.c_str(), v);
  return out;
}

std::string WorkerStateText(const v1::WorkerInfo& w) {
  std::string s = v1::WorkerState_Name(w.state());
  if (w.draining()) s += ",DRAINING";
  else if (w.cordoned()) s += ",CORDONED";
  return s;
}

std::string WorkerRow(const v1::WorkerInfo& w, int state_width) {
  std::string tasks;
  for (const auto& t : w.tasks()) tasks += (tasks.empty() ? "" : ",") + t.job_id();
  return Sprintf("%-16s %-*s %-6d %-6d %s", w.name().c_str(), state_width, WorkerStateText(w).c_str(),
                 w.slots(), w.used_slots(), tasks.c_str());
}

}  // namespace nightshift::cli
