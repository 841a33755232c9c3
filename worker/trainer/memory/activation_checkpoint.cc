#include "worker/trainer/memory/activation_checkpoint.h"

#include <mutex>
#include <utility>

#include "worker/trainer/compat.h"

namespace nightshift::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The block function travels to backward inside the autograd context.
struct BlockHolder : torch::CustomClassHolder {
  BlockHolder(BlockForward f, BlockParams* p, BlockParams* b) : fn(std::move(f)), params(p), before(b) {}
  BlockForward fn;
  BlockParams* params;  // null: the block's parameters are whole
  BlockParams* before;  // prefetched for its backward, which comes next (or null)
};

// Acquires a sharded block's parameters for a scope (no-op without).
class Acquired {
 public:
  explicit Acquired(BlockParams* p) : p_(p) {
    if (p_) p_->Acquire();
  }
  ~Acquired() {
    if (p_) p_->Release();
  }
  Acquired(const Acquired&) = delete;
  Acquired& operator=(const Acquired&) = delete;

 private:
  BlockParams* p_;
};

at::Tensor GeneratorState(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
void SetGeneratorState(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The generators dropout may draw from for a tensor on `device`.
std::vector<at::Generator> Generators(const torch::Device& device) {
  std::vector<at::Generator> gens{at::detail::getDefaultCPUGenerator()};
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) gens.push_back(at::globalContext().defaultGenerator(device));
#else
  (void)device;
#endif
  return gens;
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Runs under no-grad (Function::apply does that): nothing inside the block is saved.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& attn_bias, c10::intrusive_ptr<BlockHolder> block) {
    ctx->save_for_backward({x, attn_bias});
    const std::vector<at::Generator> gens = Generators(x.device());
    for (size_t i = 0; i < gens.size(); ++i)
      ctx->saved_data["rng" + std::to_string(i)] = GeneratorState(gens[i]);
    const compat::AutocastState autocast = compat::GetAutocastState();
    ctx->saved_data["ac_cpu"] = autocast.cpu_enabled;
    ctx->saved_data["ac_cpu_dtype"] = static_cast<int64_t>(autocast.cpu_dtype);
    ctx->saved_data["ac_cuda"] = autocast.cuda_enabled;
    ctx->saved_data["ac_cuda_dtype"] = static_cast<int64_t>(autocast.cuda_dtype);
    torch::Tensor out;
    {
      Acquired whole(block->params);
      out = block->fn(x, attn_bias);
    }
    ctx->saved_data["block"] = c10::IValue::make_capsule(std::move(block));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const variable_list saved = ctx->get_saved_variables();
    auto block = c10::static_intrusive_pointer_cast<BlockHolder>(ctx->saved_data["block"].toCapsule());
    torch::Tensor x = saved[0].detach().requires_grad_(true);
    const torch::Tensor& attn_bias = saved[1];

    // Recompute with the forward's generator and autocast state, then put ours back.
    const std::vector<at::Generator> gens = Generators(x.device());
    std::vector<at::Tensor> now;
    for (size_t i = 0; i < gens.size(); ++i) {
      now.push_back(GeneratorState(gens[i]));
      SetGeneratorState(gens[i], ctx->saved_data["rng" + std::to_string(i)].toTensor());
    }
    const compat::AutocastState autocast_now = compat::GetAutocastState();
    compat::AutocastState autocast_fwd;
    autocast_fwd.cpu_enabled = ctx->saved_data["ac_cpu"].toBool();
    autocast_fwd.cpu_dtype = static_cast<at::ScalarType>(ctx->saved_data["ac_cpu_dtype"].toInt());
    autocast_fwd.cuda_enabled = ctx->saved_data["ac_cuda"].toBool();
    autocast_fwd.cuda_dtype = static_cast<at::ScalarType>(ctx->saved_data["ac_cuda_dtype"].toInt());
    torch::Tensor out;
    Acquired whole(block->params);
    if (block->before) block->before->Prefetch();
    try {
      compat::SetAutocastState(autocast_fwd);
      torch::AutoGradMode grad(true);
      out = block->fn(x, attn_bias);
    } catch (...) {
      compat::SetAutocastState(autocast_now);
      for (size_t i = 0; i < gens.size(); ++i) SetGeneratorState(gens[i], now[i]);
      throw;
    }
    compat::SetAutocastState(autocast_now);
    for (size_t i = 0; i < gens.size(); ++i) SetGeneratorState(gens[i], now[i]);

    // Accumulates into the block's parameters and into x.grad.
    torch::autograd::backward({out}, {grad_out[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor CheckpointedBlockForward(BlockForward block, const torch::Tensor& x, const torch::Tensor& attn_bias,
                                       BlockParams* params, BlockParams* before) {
  if (!torch::GradMode::is_enabled()) {
    Acquired whole(params);
    return block(x, attn_bias);
  }
  // Without an input that requires grad no graph node is built (see the header).
  const torch::Tensor input = x.requires_grad() ? x : x.detach().requires_grad_(true);
  if (!attn_bias.defined()) {  // Function::apply takes defined tensors only: an empty stand-in
    BlockForward unbiased = [block = std::move(block)](const torch::Tensor& in, const torch::Tensor&) {
      return block(in, torch::Tensor());
    };
    return CheckpointFunction::apply(input, torch::empty({0}, x.options()),
                                     c10::make_intrusive<BlockHolder>(std::move(unbiased), params, before));
  }
  return CheckpointFunction::apply(input, attn_bias, c10::make_intrusive<BlockHolder>(std::move(block), params, before));
}

torch::Tensor BlockPlan::Run(size_t index, const BlockForward& block, const torch::Tensor& x,
                             const torch::Tensor& attn_bias, bool cached) const {
  auto at = [&](size_t i) { return i < sharded.size() ? sharded[i] : nullptr; };
  BlockParams* params = at(index);
  BlockParams* before = index > 0 ? at(index - 1) : nullptr;  // the next one backward
  const bool checkpointed = !cached && IsCheckpointedBlock(checkpoint_every, static_cast<int64_t>(index));
  if (params != nullptr) {  // gather this block (unless prefetched), and start the next one's
    params->Prefetch();
    if (BlockParams* after = at(index + 1)) after->Prefetch();
  }
  if (params != nullptr && torch::GradMode::is_enabled() && !checkpointed) {
    torch::Tensor out;
    {
      Acquired whole(params);
      out = block(x, attn_bias);
    }
    if (out.requires_grad())
      out.register_hook([params, before](const torch::Tensor&) {
        params->Acquire();
        if (before) before->Prefetch();
      });
    return out;
  }
  if (params != nullptr && !checkpointed) {
    Acquired whole(params);
    return block(x, attn_bias);
  }
  if (params != nullptr) return CheckpointedBlockForward(block, x, attn_bias, params, before);
  return checkpointed ? CheckpointedBlockForward(block, x, attn_bias) : block(x, attn_bias);
}

}  // namespace nightshift::trainer
