// Host heap policy for the trainer and nightshift-predict.
#ifndef NIGHTSHIFT_WORKER_TRAINER_HOST_MEMORY_H_
#define NIGHTSHIFT_WORKER_TRAINER_HOST_MEMORY_H_

#include <malloc.h>

#include <cstdlib>

namespace nightshift::trainer {

// Keeps freed memory in the heap; call before training allocates (main.cc, once the
// config is read). LibTorch's CPU allocator
// mallocs and frees activations of 100+ MB every step (a [32, 4, 512, 512] attention
// tensor is 128 MiB); glibc serves blocks that large with mmap and returns them with
// munmap, so each training step or predict batch would fault them in and zero them again
// (measured: about a fifth of a demo-model training step, a quarter of a
// nightshift-predict run). Costs: the resident set stays at its peak. The environment's
// MALLOC_* variables still override.
// Not with resources.sharding: full (main.cc), whose point is that a block's gathered
// parameters and gradients leave once its computation ends: a heap that keeps what was
// freed (the whole model built before sharding, every block's gathers, cut up as the
// sizes differ) reached 2.9 GiB resident per rank where glibc's default policy peaks at
// 1.3 GiB (1.7 on rank 0, which gathers the model to export it): 151M parameters on 4
// ranks, tests/e2e/sharding_test.cc's model.
// The gathered blocks are kept by the optimizer's own spares (fully_sharded.h) instead.
inline void KeepFreedHostMemory() {
  if (std::getenv("MALLOC_MMAP_MAX_") == nullptr) ::mallopt(M_MMAP_MAX, 0);
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) ::mallopt(M_TRIM_THRESHOLD, -1);
}

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_HOST_MEMORY_H_
