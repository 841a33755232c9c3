// Defaults and limits of the JobSpec's numeric fields: the one table that the
// coordinator's validation (common/spec.cc) and the trainer's config (worker/trainer/
// config.cc; the trainer also runs alone under torchrun) both apply, so the two cannot
// drift. Standard library only (the trainer uses it).
//
// `fallback`: the value that replaces 0 ("absent": proto3 cannot tell them apart); 0 in
// the table means 0 is itself a value (and the field has no default). Ranges are
// inclusive; a RealField's max is exclusive where max_exclusive.
#ifndef NIGHTSHIFT_COMMON_FORMAT_SPEC_LIMITS_H_
#define NIGHTSHIFT_COMMON_FORMAT_SPEC_LIMITS_H_

#include <cstdint>
#include <string>

namespace nightshift::format {

struct IntField {
  const char* name;  // the JobSpec path, e.g. "model.layers"
  int64_t fallback;  // replaces 0; 0: none
  int64_t min, max;
};

struct RealField {
  const char* name;
  double fallback;  // replaces 0; 0: none
  double min, max;
  bool max_exclusive;
};

namespace limits {
// model
inline constexpr IntField kLayers{"model.layers", 2, 1, 128};
inline constexpr IntField kDModel{"model.d_model", 128, 1, 65536};
inline constexpr IntField kHeads{"model.heads", 4, 1, 65536};  // and must divide d_model
inline constexpr IntField kFfn{"model.ffn", 0, 1, 1 << 20};    // 0: 4 x d_model
inline constexpr IntField kMaxLen{"model.max_len", 512, 2, 1 << 16};
inline constexpr RealField kDropout{"model.dropout", 0, 0, 1, true};
inline constexpr RealField kAttentionDropout{"model.attention_dropout", 0, 0, 1, true};
// train
inline constexpr IntField kEpochs{"train.epochs", 1, 1, 100000};
inline constexpr RealField kLr{"train.lr", 1e-3, 0, 10, false};
inline constexpr RealField kWeightDecay{"train.weight_decay", 0, 0, 10, false};
inline constexpr IntField kWarmupSteps{"train.warmup_steps", 0, 0, 1000000000};
inline constexpr RealField kGradClip{"train.grad_clip", 0, 0, 1e6, false};  // 0 disables
inline constexpr IntField kMaxSteps{"train.max_steps", 0, 0, int64_t{1} << 40};
inline constexpr IntField kThreads{"train.threads", 0, 0, 1024};
inline constexpr IntField kBatchSize{"train.batching.batch_size", 32, 1, 1 << 20};
inline constexpr IntField kPrefetch{"train.batching.prefetch", 2, 1, 64};
inline constexpr IntField kMaxTokens{"train.batching.max_tokens", 0, 1, int64_t{1} << 40};
// resources
inline constexpr IntField kWorldSize{"resources.world_size", 1, 1, 4096};
inline constexpr IntField kTimeoutSeconds{"resources.timeout_seconds", 300, 1, 86400};
inline constexpr IntField kBucketMb{"resources.bucket_mb", 25, 1, 1024};
// checkpoint
inline constexpr IntField kEverySteps{"checkpoint.every_steps", 0, 0, 1000000000};
inline constexpr IntField kEverySeconds{"checkpoint.every_seconds", 0, 0, 30 * 86400};
inline constexpr IntField kKeepLast{"checkpoint.keep_last", 3, 1, 1000};
// fields whose 0 is a value: `optional` in the proto, these apply when they are absent
inline constexpr double kDefaultDropout = 0.1;
inline constexpr double kDefaultWeightDecay = 0.01;
inline constexpr int kDefaultWarmupSteps = 100;
inline constexpr double kDefaultGradClip = 1.0;
inline constexpr int kDefaultEverySteps = 200;
// strings with a default
inline constexpr const char* kDefaultPrecision = "fp32";
inline constexpr const char* kDefaultDevice = "auto";
}  // namespace limits

// `value`, or the field's fallback when value is 0.
inline int64_t WithDefault(const IntField& f, int64_t value) { return value == 0 ? f.fallback : value; }
inline double WithDefault(const RealField& f, double value) { return value == 0 ? f.fallback : value; }

inline bool InRange(const IntField& f, int64_t v) { return v >= f.min && v <= f.max; }
inline bool InRange(const RealField& f, double v) {  // false for NaN
  return v >= f.min && (f.max_exclusive ? v < f.max : v <= f.max);
}

// "must be in [1, 128]" (or "[0, 1)"), for error messages.
inline std::string RangeText(const IntField& f) {
  return "must be in [" + std::to_string(f.min) + ", " + std::to_string(f.max) + "]";
}
inline std::string RangeText(const RealField& f) {
  auto num = [](double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  return "must be in [" + num(f.min) + ", " + num(f.max) + (f.max_exclusive ? ")" : "]");
}

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_SPEC_LIMITS_H_
