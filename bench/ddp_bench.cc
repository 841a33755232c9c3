// Data-parallel step time: one process per rank (bench/ddp_bench.sh starts them).
//   nightshift-ddp-bench --rank R --world W --port P [--steps N] [--batch B] [--len L]
//                        [--bucket-mb M] [--overlap 0|1] [--threads T]
// Each rank trains the built-in classifier (d_model 128, 2 layers, vocab 8000) on random
// tokens, batch B x L per rank, fp32, AdamW; after 3 warm-up steps it times N steps.
// Rank 0 prints one JSON line: mean step seconds, all-reduce seconds, the share of the
// all-reduce hidden behind backward, the time Finish() blocked.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "worker/trainer/parallel/ddp.h"
#include "worker/trainer/models/model.h"

namespace nt = nightshift::trainer;

int main(int argc, char** argv) {
  int rank = 0, world = 1, port = 0, steps = 20, batch = 16, len = 128, bucket_mb = 25, overlap = 1,
      threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--rank") rank = v;
    else if (k == "--world") world = v;
    else if (k == "--port") port = v;
    else if (k == "--steps") steps = v;
    else if (k == "--batch") batch = v;
    else if (k == "--len") len = v;
    else if (k == "--bucket-mb") bucket_mb = v;
    else if (k == "--overlap") overlap = v;
    else if (k == "--threads") threads = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  torch::set_num_threads(threads);
  nt::ModelConfig mc;
  mc.layers = 2;
  mc.d_model = 128;
  mc.heads = 4;
  mc.ffn = 512;
  mc.dropout = 0.0;
  mc.max_len = len;
  const int64_t vocab = 8000, classes = 2;
  torch::manual_seed(1);
  nt::TransformerClassifier model = nt::BuildModel(mc, vocab, classes, 0);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));

  std::unique_ptr<nt::GradientSync> sync;
  if (world > 1) {
    nt::ProcessGroupOptions po;
    po.rank = rank;
    po.world_size = world;
    po.master_addr = "127.0.0.1";
    po.master_port = port;
    po.timeout = std::chrono::seconds(120);
    nt::GradientSyncOptions so;
    so.bucket_bytes = int64_t{bucket_mb} << 20;
    so.overlap = overlap != 0;
    sync = std::make_unique<nt::GradientSync>(nt::ProcessGroup::Create(po), model->parameters(), so);
    sync->Broadcast(model->parameters());
  }
  auto gen = at::detail::createCPUGenerator(100 + rank);
  torch::Tensor tokens = torch::randint(4, vocab, {batch, len}, gen, torch::kInt64);
  torch::Tensor mask = torch::zeros({batch, len}, torch::kBool);
  torch::Tensor labels = torch::randint(0, classes, {batch}, gen, torch::kInt64);

  double step_sum = 0, ar_sum = 0, hidden_sum = 0, wait_sum = 0;
  int buckets = 0;
  for (int s = 0; s < steps + 3; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(tokens, mask), labels).backward();
    nt::SyncStats st;
    if (sync) st = sync->Finish();
    opt.step();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < 3) continue;
    step_sum += dt;
    ar_sum += st.allreduce_seconds;
    hidden_sum += st.hidden_fraction;
    wait_sum += st.wait_seconds;
    buckets = st.buckets;
  }
  if (sync) sync->group().Barrier();
  if (rank == 0)
    std::printf("{\"world\": %d, \"overlap\": %d, \"bucket_mb\": %d, \"buckets\": %d, \"batch\": %d, "
                "\"len\": %d, \"threads\": %d, \"step_seconds\": %.4f, \"allreduce_seconds\": %.4f, "
                "\"hidden_fraction\": %.3f, \"wait_seconds\": %.4f}\n",
                world, overlap, bucket_mb, buckets, batch, len, threads, step_sum / steps, ar_sum / steps,
                hidden_sum / steps, wait_sum / steps);
  return 0;
}
