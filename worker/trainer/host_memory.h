// Host heap policy for the trainer and nightshift-predict.
#ifndef NIGHTSHIFT_WORKER_TRAINER_HOST_MEMORY_H_
#define NIGHTSHIFT_WORKER_TRAINER_HOST_MEMORY_H_

#include <malloc.h>

#include <cstdlib>

namespace nightshift::trainer {

// Keeps freed memory in the heap; call first thing in main. LibTorch's CPU allocator
// mallocs and frees activations of 100+ MB every step (a [32, 4, 512, 512] attention
// tensor is 128 MiB); glibc serves blocks that large with mmap and returns them with
// munmap, so each training step or predict batch would fault them in and zero them again
// (measured: about a fifth of a demo-model training step, a quarter of a
// nightshift-predict run). Costs: the resident set stays at its peak. The environment's
// MALLOC_* variables still override.
inline void KeepFreedHostMemory() {
  if (std::getenv("MALLOC_MMAP_MAX_") == nullptr) ::mallopt(M_MMAP_MAX, 0);
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) ::mallopt(M_TRIM_THRESHOLD, -1);
}

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_HOST_MEMORY_H_
