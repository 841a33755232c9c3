// Fused against explicit attention in the trainer's own blocks (issue 15): forward +
// backward of the built-in classifier on random tokens, alternating the two paths.
//   nightshift-attention-bench [--batch 32] [--len 512] [--layers 2] [--steps 10] [--threads 2]
//                              [--pairs 3] [--bf16 0|1]
// Model: d_model 128, 4 heads, ffn 512, vocab 8000, dropout 0 (so both paths compute the
// same function), a quarter of each row padding. After one warm-up step per path it times
// `steps` steps of each path, `pairs` times alternating, and prints one JSON line per
// measurement: mean seconds per forward+backward and the peak resident set.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "worker/trainer/optim/amp.h"
#include "worker/trainer/models/model.h"

namespace nt = nightshift::trainer;

int main(int argc, char** argv) {
  int batch = 32, len = 512, layers = 2, steps = 10, threads = 2, pairs = 3, bf16 = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--batch") batch = v;
    else if (k == "--len") len = v;
    else if (k == "--layers") layers = v;
    else if (k == "--steps") steps = v;
    else if (k == "--threads") threads = v;
    else if (k == "--pairs") pairs = v;
    else if (k == "--bf16") bf16 = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  torch::set_num_threads(threads);
  nt::ModelConfig mc;
  mc.layers = layers;
  mc.d_model = 128;
  mc.heads = 4;
  mc.ffn = 512;
  mc.dropout = 0.0;
  mc.max_len = len;
  torch::manual_seed(1);
  nt::TransformerClassifier model = nt::BuildModel(mc, 8000, 2, 0);
  torch::Tensor tokens = torch::randint(4, 8000, {batch, len}, torch::kLong);
  tokens.narrow(1, len - len / 4, len / 4).narrow(0, 0, batch / 2).fill_(0);  // padding in half the rows
  torch::Tensor labels = torch::randint(0, 2, {batch}, torch::kLong);
  const std::string precision = bf16 ? "bf16" : "fp32";
  auto step = [&] {
    model->zero_grad();
    torch::Tensor loss;
    {
      nt::AutocastRegion autocast(precision, torch::kCPU);
      loss = torch::nn::functional::cross_entropy(model->forward(tokens, tokens.eq(0)).to(torch::kFloat), labels);
    }
    loss.backward();
  };
  auto time_path = [&](bool explicit_path, int n) {
    model->set_force_explicit_attention(explicit_path);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
  };
  time_path(false, 1);
  time_path(true, 1);
  for (int p = 0; p < pairs; ++p) {
    for (bool explicit_path : {false, true}) {
      const double s = time_path(explicit_path, steps);
      struct rusage usage {};
      getrusage(RUSAGE_SELF, &usage);
      std::printf("{\"path\": \"%s\", \"pair\": %d, \"batch\": %d, \"len\": %d, \"precision\": \"%s\", "
                  "\"seconds_per_step\": %.4f, \"tokens_per_second\": %.0f, \"peak_rss_mib\": %ld}\n",
                  explicit_path ? "explicit" : "fused", p, batch, len, precision.c_str(), s, batch * len / s,
                  usage.ru_maxrss / 1024);
      std::fflush(stdout);
    }
  }
  return 0;
}
