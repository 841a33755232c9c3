// The language-model head and its cross-entropy in one, a chunk of tokens at a time
// (as Liger's fused linear cross-entropy does): the logits [tokens, V] are never whole.
// Forward makes each chunk's logits once, takes its loss, turns them in place into their
// gradient (softmax - one-hot) and multiplies that into the gradients of the hidden states
// [N, D] and of the head [V, D], which it keeps (the loss is a training objective's last
// operation: backward only scales them). With a vocabulary of 32,000 and 2,048 tokens a
// step, the whole logits, their log-softmax and their gradient are 250 MiB each; a chunk
// is at most kChunkBytes. No logits are recomputed: the FLOPs are the unchunked path's.
//
// Numbers: the sum of per-token cross-entropies, as F::cross_entropy(hidden @ weight^T,
// targets, reduction sum, ignore_index -100) computes it, equal up to the order of
// summation (tests/worker/trainer/lm_loss_test.cc). The logits are computed in the dtype
// the matmul gives under the caller's autocast (bf16/fp16 for an autocast region, recorded
// for backward, which runs outside it), and the softmax in float32, as the unchunked path
// (logits.to(float) before the loss) does.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_LM_LOSS_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_LM_LOSS_H_

#include <torch/torch.h>

#include <cstdint>

namespace nightshift::trainer {

// Bytes of float32 logits a chunk may hold (the chunk's token count follows from V).
constexpr int64_t kChunkBytes = int64_t{32} << 20;

// hidden [N, D] (any float dtype, requires grad or not), weight [V, D] (the head: lm_head
// or the tied token embedding), targets int64 [N] (-100: not counted). Returns a float32
// scalar: the sum over counted tokens of -log softmax(hidden @ weight^T)[target].
// chunk_tokens: tokens per chunk (0: as many as kChunkBytes of logits hold).
torch::Tensor LinearCrossEntropySum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t chunk_tokens = 0);

// Evaluation (no gradients), a chunk at a time as above: the loss sum and the number of
// counted tokens whose likeliest prediction (argmax of the logits) is their target.
struct LmEvalSums {
  double loss_sum = 0;
  int64_t correct = 0;
};
LmEvalSums LinearCrossEntropyEval(const torch::Tensor& hidden, const torch::Tensor& weight,
                                  const torch::Tensor& targets, int64_t chunk_tokens = 0);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_LM_LOSS_H_
