#include "worker/trainer/models/dropout.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <type_traits>

namespace nightshift::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::atomic<uint64_t> g_stream{0};

uint64_t DrawSeed() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get<at::CPUGeneratorImpl>()->random64() ^ Mix(g_stream.load() * kGamma);
}

// Which elements survive: element i is dropped when the top 24 bits of its hash fall
// below drop_below (= p * 2^24); survivors are multiplied by scale (= 1 / (1 - p)).
struct Mask {
  uint64_t seed;
  uint32_t drop_below;
  double scale;
};

Mask NewMask(double p) {
  return Mask{DrawSeed(), static_cast<uint32_t>(std::llround(p * double(1 << 24))), 1.0 / (1.0 - p)};
}

// `x` with the mask applied (a new contiguous tensor).
torch::Tensor Apply(const Mask& mask, const torch::Tensor& x) {
  const torch::Tensor in = x.contiguous();
  torch::Tensor out = torch::empty_like(in);
  const int64_t n = in.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, in.scalar_type(), "nightshift_dropout", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const acc_t scale = static_cast<acc_t>(mask.scale);
    at::parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t h = Mix(mask.seed + static_cast<uint64_t>(i + 1) * kGamma);
        // A multiply, also for dropped elements, so a NaN or inf stays visible (as in F::dropout).
        const acc_t factor = static_cast<uint32_t>(h >> 40) >= mask.drop_below ? scale : acc_t(0);
        dst[i] = static_cast<scalar_t>(static_cast<acc_t>(src[i]) * factor);
      }
    });
  });
  return out;
}

// Saves only the mask's seed and parameters; backward recomputes the mask.
struct DropoutFunction : torch::autograd::Function<DropoutFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, double p) {
    const Mask mask = NewMask(p);
    ctx->saved_data["seed"] = static_cast<int64_t>(mask.seed);
    ctx->saved_data["drop_below"] = static_cast<int64_t>(mask.drop_below);
    ctx->saved_data["scale"] = mask.scale;
    return Apply(mask, input);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Mask mask{static_cast<uint64_t>(ctx->saved_data["seed"].toInt()),
                    static_cast<uint32_t>(ctx->saved_data["drop_below"].toInt()),
                    ctx->saved_data["scale"].toDouble()};
    return {Apply(mask, grads[0]), torch::Tensor()};
  }
};

}  // namespace

void SetDropoutStream(uint64_t stream) { g_stream.store(stream); }

torch::Tensor Dropout(const torch::Tensor& input, double p, bool training) {
  if (!training || p <= 0) return input;
  if (!input.device().is_cpu() || p >= 1)
    return torch::nn::functional::dropout(input, torch::nn::functional::DropoutFuncOptions().p(p).training(true));
  return DropoutFunction::apply(input, p);  // records no graph without grad mode
}

}  // namespace nightshift::trainer
