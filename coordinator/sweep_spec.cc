#include "coordinator/sweep_spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <set>

#include "common/spec.h"
#include "common/spec_rules/spec_rules.h"

namespace nightshift {
namespace {

constexpr int kMaxTrials = 1000;

// `root` with the dotted `field` set to the scalar `value`.
YAML::Node WithField(const YAML::Node& root, const std::string& field, const std::string& value) {
  YAML::Node copy = YAML::Clone(root);
  YAML::Node node = copy;
  size_t start = 0;
  for (;;) {
    const size_t dot = field.find('.', start);
    const std::string key = field.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) {
      node[key] = value;
      return copy;
    }
    if (!node[key].IsMap()) node[key] = YAML::Node(YAML::NodeType::Map);
    YAML::Node next = node[key];
    node.reset(next);
    start = dot + 1;
  }
}

// A copy of `node` in which no two places share a node. yaml-cpp keeps an alias (*a) as the
// very node of its anchor (&a), Clone too: setting one would set the other, and a searched
// field aliased to `priority` or `model.arch` would set those (PermitSpec checked the base's).
YAML::Node Unshared(const YAML::Node& node) {
  if (node.IsScalar()) return YAML::Node(node.Scalar());
  if (node.IsSequence()) {
    YAML::Node out(YAML::NodeType::Sequence);
    for (const YAML::Node& item : node) out.push_back(Unshared(item));
    return out;
  }
  if (node.IsMap()) {
    YAML::Node out(YAML::NodeType::Map);
    for (const auto& kv : node) out.force_insert(Unshared(kv.first), Unshared(kv.second));
    return out;
  }
  return YAML::Node(node.Type());
}

StatusOr<v1::JobSpec> SpecWith(const std::string& base_yaml, const std::map<std::string, std::string>& params) {
  YAML::Node root = Unshared(YAML::Load(base_yaml));
  for (const auto& [field, value] : params) root = WithField(root, field, value);
  YAML::Emitter out;
  out << root;
  return LoadJobSpec(out.c_str());
}

Status Bad(const std::string& key, const std::string& message) { return Status::InvalidArgument(key + ": " + message); }

Status ParseParam(const std::string& field, const YAML::Node& node, v1::SearchParam* p) {
  const std::string key = "search." + field;
  p->set_field(field);
  if (!node.IsMap() || node.size() != 1)
    return Bad(key, "expected one of {choices: [...]}, {uniform: [low, high]}, {log_uniform: [low, high]}, {int: [low, high]}");
  const std::string kind = node.begin()->first.as<std::string>();
  const YAML::Node& values = node.begin()->second;
  p->set_kind(kind);
  if (!values.IsSequence() || values.size() == 0) return Bad(key + "." + kind, "expected a list");
  if (kind == "choices") {
    std::set<std::string> seen;
    for (const auto& v : values) {
      if (!v.IsScalar()) return Bad(key + ".choices", "each choice is a single value");
      if (!seen.insert(v.Scalar()).second) return Bad(key + ".choices", "'" + v.Scalar() + "' is listed twice");
      p->add_choices(v.Scalar());
    }
    return Status::OK();
  }
  if (kind != "uniform" && kind != "log_uniform" && kind != "int")
    return Bad(key, "unknown kind '" + kind + "' (choices, uniform, log_uniform, int)");
  if (values.size() != 2) return Bad(key + "." + kind, "expected [low, high]");
  try {
    p->set_low(values[0].as<double>());
    p->set_high(values[1].as<double>());
  } catch (const YAML::Exception&) {
    return Bad(key + "." + kind, "low and high must be numbers");
  }
  if (!(p->low() < p->high())) return Bad(key + "." + kind, "low must be below high");
  if (kind == "log_uniform" && p->low() <= 0) return Bad(key + ".log_uniform", "low must be above 0");
  if (kind == "int" && (p->low() != std::floor(p->low()) || p->high() != std::floor(p->high())))
    return Bad(key + ".int", "low and high must be integers");
  return Status::OK();
}

// The values to check of a param: every choice; both ends of a range.
std::vector<std::string> Extremes(const v1::SearchParam& p) {
  if (p.kind() == "choices") return {p.choices().begin(), p.choices().end()};
  return {FormatNumber(p.low()), FormatNumber(p.high())};
}

int64_t SizeOf(const v1::SearchParam& p) {
  if (p.kind() == "choices") return p.choices_size();
  if (p.kind() == "int") return static_cast<int64_t>(p.high() - p.low()) + 1;
  return 0;  // continuous: not a grid's
}

template <typename T>
Status ReadScalar(const YAML::Node& root, const std::string& key, T* out) {
  if (!root[key]) return Status::OK();
  try {
    *out = root[key].as<T>();
  } catch (const YAML::Exception&) {
    return Bad(key, "expected a single value of the right type");
  }
  return Status::OK();
}

Status CheckKeys(const YAML::Node& node, const std::string& where, const std::set<std::string>& known) {
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return Bad(where + key, "not a sweep field (" + list + ")");
    }
  }
  return Status::OK();
}

// base (the job spec, checked) and search (every value at its extremes checked on the base).
Status ReadBaseAndSearch(const YAML::Node& root, v1::SweepSpec* spec) {
  if (!root["base"] || !root["base"].IsMap()) return Bad("base", "the job spec every trial starts from (a mapping)");
  YAML::Emitter base;
  base << root["base"];
  spec->set_base_yaml(base.c_str());
  StatusOr<v1::JobSpec> checked = LoadJobSpec(spec->base_yaml());
  if (!checked.ok()) return Bad("base", checked.status().message());
  if (!root["search"] || !root["search"].IsMap() || root["search"].size() == 0)
    return Bad("search", "the fields to search and their values (a mapping)");
  for (const auto& kv : root["search"]) {
    const std::string field = kv.first.as<std::string>();
    if (field == "priority" || field == "model.arch" || field == "name")
      return Bad("search." + field, "not searchable: every trial takes the base's");
    NS_RETURN_IF_ERROR(ParseParam(field, kv.second, spec->add_params()));
    for (const std::string& value : Extremes(spec->params(spec->params_size() - 1))) {
      StatusOr<v1::JobSpec> trial = SpecWith(spec->base_yaml(), {{field, value}});
      if (!trial.ok()) return Bad("search." + field, value + ": " + trial.status().message());
    }
  }
  return Status::OK();
}

// max_trials (a grid's default: its size) and parallelism.
Status ReadBudget(int max_trials, int parallelism, v1::SweepSpec* spec) {
  if (spec->method() == "grid") {
    for (const v1::SearchParam& p : spec->params())
      if (SizeOf(p) == 0) return Bad("search." + p.field(), "a grid takes choices or int ranges");
    const int64_t size = GridSize(*spec);
    if (size > kMaxTrials) return Bad("search", "the grid has " + std::to_string(size) + " points, more than 1000");
    if (max_trials == 0 || max_trials > size) max_trials = static_cast<int>(size);
  }
  if (max_trials < 1 || max_trials > kMaxTrials) return Bad("max_trials", "must be in [1, 1000]");
  if (parallelism < 1 || parallelism > max_trials) return Bad("parallelism", "must be in [1, max_trials]");
  spec->set_max_trials(max_trials);
  spec->set_parallelism(parallelism);
  return Status::OK();
}

Status ReadAsha(const YAML::Node& root, v1::SweepSpec* spec) {
  if (spec->method() != "asha") return root["asha"] ? Bad("asha", "only for method asha") : Status::OK();
  if (!root["asha"] || !root["asha"].IsMap())
    return Bad("asha", "method asha needs asha: {min_steps: N} or asha: {min_epochs: N}");
  NS_RETURN_IF_ERROR(
      CheckKeys(root["asha"], "asha.", {"min_steps", "min_epochs", "reduction_factor", "min_early_stopping_rate"}));
  int64_t min_steps = 0, min_epochs = 0;
  int eta = 4, rate = 0;
  NS_RETURN_IF_ERROR(ReadScalar(root["asha"], "min_steps", &min_steps));
  NS_RETURN_IF_ERROR(ReadScalar(root["asha"], "min_epochs", &min_epochs));
  NS_RETURN_IF_ERROR(ReadScalar(root["asha"], "reduction_factor", &eta));
  NS_RETURN_IF_ERROR(ReadScalar(root["asha"], "min_early_stopping_rate", &rate));
  if (root["asha"]["min_steps"] && root["asha"]["min_epochs"])
    return Bad("asha.min_epochs", "rungs count steps (min_steps) or epochs (min_epochs), not both");
  if (root["asha"]["min_epochs"]) {
    if (min_epochs < 1 || min_epochs > 1000000)
      return Bad("asha.min_epochs", "must be in [1, 1000000] (the epochs to the first rung)");
  } else if (min_steps < 1 || min_steps > 1000000000) {
    return Bad("asha.min_steps", "must be in [1, 1000000000] (the steps to the first rung)");
  }
  if (eta < 2) return Bad("asha.reduction_factor", "must be at least 2");
  if (rate < 0) return Bad("asha.min_early_stopping_rate", "must be at least 0");
  spec->mutable_asha()->set_min_steps(min_steps);
  spec->mutable_asha()->set_min_epochs(min_epochs);
  spec->mutable_asha()->set_reduction_factor(eta);
  spec->mutable_asha()->set_min_early_stopping_rate(rate);
  return Status::OK();
}

}  // namespace

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

namespace {

StatusOr<v1::SweepSpec> ReadSweepSpec(const YAML::Node& root) {
  if (!root.IsMap()) return Status::InvalidArgument("sweep: expected a mapping of fields");
  NS_RETURN_IF_ERROR(CheckKeys(root, "", {"name", "base", "search", "method", "metric", "direction", "max_trials",
                                           "parallelism", "seed", "asha"}));
  v1::SweepSpec spec;
  std::string name = "sweep", method, metric, direction = "minimize";
  int max_trials = 0, parallelism = 1;
  uint64_t seed = 0;
  NS_RETURN_IF_ERROR(ReadScalar(root, "name", &name));
  NS_RETURN_IF_ERROR(ReadScalar(root, "method", &method));
  NS_RETURN_IF_ERROR(ReadScalar(root, "metric", &metric));
  NS_RETURN_IF_ERROR(ReadScalar(root, "direction", &direction));
  NS_RETURN_IF_ERROR(ReadScalar(root, "max_trials", &max_trials));
  NS_RETURN_IF_ERROR(ReadScalar(root, "parallelism", &parallelism));
  NS_RETURN_IF_ERROR(ReadScalar(root, "seed", &seed));
  if (method != "grid" && method != "random" && method != "asha") return Bad("method", "must be grid, random or asha");
  if (metric.empty()) return Bad("metric", "name the evaluation metric to compare trials on (val_loss, val_accuracy, ...)");
  if (direction != "minimize" && direction != "maximize") return Bad("direction", "must be minimize or maximize");
  spec.set_name(name);
  spec.set_method(method);
  spec.set_metric(metric);
  spec.set_maximize(direction == "maximize");
  spec.set_seed(seed);

  NS_RETURN_IF_ERROR(ReadBaseAndSearch(root, &spec));
  // A misspelt metric is never reported: ASHA would pause nothing and no trial be best.
  if (!spec_rules::IsOneOf(spec_rules::limits::kMetrics, metric))
    return Bad("metric", "'" + metric + "' is not an evaluation metric (" + std::string(spec_rules::limits::kMetrics) + ")");
  NS_RETURN_IF_ERROR(ReadBudget(max_trials, parallelism, &spec));
  NS_RETURN_IF_ERROR(ReadAsha(root, &spec));
  return spec;
}

}  // namespace

StatusOr<v1::SweepSpec> LoadSweepSpec(const std::string& text) {
  try {
    return ReadSweepSpec(YAML::Load(text));
  } catch (const YAML::ParserException& e) {
    return Status::InvalidArgument("sweep does not parse as YAML: line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  } catch (const YAML::Exception& e) {  // a key or value of another kind than asked (a list for a field's name)
    return Status::InvalidArgument("sweep: " + (e.mark.is_null() ? std::string() : "line " + std::to_string(e.mark.line + 1) + ": ") +
                                   e.msg);
  }
}

int64_t GridSize(const v1::SweepSpec& spec) {
  int64_t size = 1;
  for (const v1::SearchParam& p : spec.params()) size *= std::max<int64_t>(1, SizeOf(p));
  return size;
}

std::map<std::string, std::string> TrialParams(const v1::SweepSpec& spec, int index) {
  std::map<std::string, std::string> params;
  if (spec.method() == "grid") {
    int64_t rest = index;
    for (int i = spec.params_size() - 1; i >= 0; --i) {
      const v1::SearchParam& p = spec.params(i);
      const int64_t n = SizeOf(p), at = rest % n;
      rest /= n;
      params[p.field()] = p.kind() == "choices" ? p.choices(static_cast<int>(at)) : FormatNumber(p.low() + at);
    }
    return params;
  }
  std::seed_seq seq{static_cast<uint32_t>(spec.seed()), static_cast<uint32_t>(spec.seed() >> 32),
                    static_cast<uint32_t>(index)};
  std::mt19937_64 rng(seq);
  for (const v1::SearchParam& p : spec.params()) {
    if (p.kind() == "choices") {
      params[p.field()] = p.choices(std::uniform_int_distribution<int>(0, p.choices_size() - 1)(rng));
    } else if (p.kind() == "int") {
      params[p.field()] = FormatNumber(static_cast<double>(
          std::uniform_int_distribution<int64_t>(static_cast<int64_t>(p.low()), static_cast<int64_t>(p.high()))(rng)));
    } else if (p.kind() == "log_uniform") {
      params[p.field()] = FormatNumber(std::exp(std::uniform_real_distribution<double>(std::log(p.low()), std::log(p.high()))(rng)));
    } else {
      params[p.field()] = FormatNumber(std::uniform_real_distribution<double>(p.low(), p.high())(rng));
    }
  }
  return params;
}

StatusOr<v1::JobSpec> TrialSpec(const v1::SweepSpec& spec, const std::map<std::string, std::string>& params) {
  StatusOr<v1::JobSpec> job = SpecWith(spec.base_yaml(), params);
  if (!job.ok() || spec.method() != "asha") return job;
  const int64_t every = job->eval().every_steps();
  if (spec.asha().min_epochs() > 0)
    job->mutable_eval()->clear_every_steps();  // rungs fall at epochs' ends: evaluations too
  else if (every <= 0 || spec.asha().min_steps() % every != 0)  // rungs at multiples of min_steps: evaluations too
    job->mutable_eval()->set_every_steps(static_cast<int32_t>(spec.asha().min_steps()));
  NS_RETURN_IF_ERROR(DefaultAndValidateJobSpec(&job.value()));
  return job;
}

}  // namespace nightshift
