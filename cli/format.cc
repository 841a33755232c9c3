#include "cli/format.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <sstream>
#include <vector>

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
  // The memory its ranks may use together (the scheduler's per-slot check: scheduler.h).
  const std::string memory = w.memory_bytes() > 0 ? Sprintf("%.1fG", double(w.memory_bytes()) / (1 << 30)) : "-";
  return Sprintf("%-16s %-*s %-6d %-6d %-7s %s", w.name().c_str(), state_width, WorkerStateText(w).c_str(),
                 w.slots(), w.used_slots(), memory.c_str(), tasks.c_str());
}

namespace {

// The training loss at `step`: that of the last kept point at or before it (NaN: none).
double LossAt(const v1::AttemptMetrics& a, int64_t step) {
  double loss = std::nan("");
  for (const auto& t : a.train())
    if (t.step() <= step) loss = t.loss();
  return loss;
}

std::string Number(double v) { return std::isnan(v) ? "-" : Sprintf("%.4f", v); }

}  // namespace

std::string MetricsTable(const v1::JobMetrics& m) {
  std::string out;
  for (const auto& a : m.attempts()) {
    std::set<std::string> names;
    for (const auto& e : a.evals())
      for (const auto& [k, v] : e.metrics()) names.insert(k);
    out += Sprintf("Attempt %d: %d evaluations, %d training points (every %lld steps)\n", a.attempt(),
                   a.evals_size(), a.train_size(), static_cast<long long>(a.stride()));
    if (a.evals().empty()) continue;
    out += Sprintf("  %-6s %-8s %-10s", "EPOCH", "STEP", "LOSS");
    for (const auto& n : names) out += Sprintf(" %-14s", n.c_str());
    out += "\n";
    for (const auto& e : a.evals()) {
      out += Sprintf("  %-6d %-8lld %-10s", e.epoch(), static_cast<long long>(e.step()),
                     Number(LossAt(a, e.step())).c_str());
      for (const auto& n : names) {
        auto it = e.metrics().find(n);
        out += Sprintf(" %-14s", Number(it == e.metrics().end() ? std::nan("") : it->second).c_str());
      }
      out += "\n";
    }
  }
  if (m.attempts().empty()) out = "no metrics yet: the job has not reported a step\n";
  return out;
}

std::string MetricsCsv(const v1::JobMetrics& m) {
  std::string out = "attempt,step,epoch,metric,value\n";
  for (const auto& a : m.attempts()) {
    for (const auto& t : a.train()) {
      const std::pair<const char*, double> values[] = {
          {"loss", t.loss()}, {"lr", t.lr()}, {"tokens_per_second", t.tokens_per_second()}};
      for (const auto& [name, v] : values)
        out += Sprintf("%d,%lld,%d,%s,%.17g\n", a.attempt(), static_cast<long long>(t.step()), t.epoch(), name, v);
    }
    for (const auto& e : a.evals()) {
      std::map<std::string, double> sorted(e.metrics().begin(), e.metrics().end());
      for (const auto& [name, v] : sorted)
        out += Sprintf("%d,%lld,%d,%s,%.17g\n", a.attempt(), static_cast<long long>(e.step()), e.epoch(),
                       name.c_str(), v);
    }
  }
  return out;
}

std::string LossCurve(const v1::JobMetrics& m, int width, int height) {
  std::vector<std::pair<int64_t, double>> points;
  for (const auto& a : m.attempts())
    for (const auto& t : a.train())
      if (std::isfinite(t.loss())) points.emplace_back(t.step(), t.loss());
  if (points.size() < 2 || width < 2 || height < 2) return "";
  int64_t s0 = points[0].first, s1 = points[0].first;
  double l0 = points[0].second, l1 = points[0].second;
  for (const auto& [s, l] : points) {
    s0 = std::min(s0, s);
    s1 = std::max(s1, s);
    l0 = std::min(l0, l);
    l1 = std::max(l1, l);
  }
  if (s1 == s0) s1 = s0 + 1;
  if (l1 - l0 < 1e-12) l1 = l0 + 1e-12;
  std::vector<std::string> grid(static_cast<size_t>(height), std::string(static_cast<size_t>(width), ' '));
  for (const auto& [s, l] : points) {
    const int x = static_cast<int>(std::lround(static_cast<double>(s - s0) / static_cast<double>(s1 - s0) * (width - 1)));
    const int y = static_cast<int>(std::lround((l1 - l) / (l1 - l0) * (height - 1)));
    grid[static_cast<size_t>(y)][static_cast<size_t>(x)] = '*';
  }
  std::string out = "loss\n";
  for (int y = 0; y < height; ++y) {
    const std::string label = y == 0 ? Sprintf("%.4f", l1) : y == height - 1 ? Sprintf("%.4f", l0) : "";
    out += Sprintf("%10s |%s\n", label.c_str(), grid[static_cast<size_t>(y)].c_str());
  }
  out += Sprintf("%10s +%s\n", "", std::string(static_cast<size_t>(width), '-').c_str());
  const std::string left = Sprintf("%lld", static_cast<long long>(s0));
  const std::string right = Sprintf("%lld", static_cast<long long>(s1));
  const int gap = std::max(1, width - static_cast<int>(left.size() + right.size()));
  out += Sprintf("%10s  %s%s%s step\n", "", left.c_str(), std::string(static_cast<size_t>(gap), ' ').c_str(),
                 right.c_str());
  return out;
}

}  // namespace nightshift::cli
