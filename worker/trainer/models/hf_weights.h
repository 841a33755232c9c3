// A Hugging Face model folder in: its config.json (the fields our architectures read)
// and its weights (model.safetensors, or the shards model.safetensors.index.json names).
//
// Memory: every weight file is mapped (private: copy-on-write), never read into a buffer.
// An F32 tensor at a 4-byte-aligned offset becomes its float32 CPU parameter as a view of
// the mapping (LoadHfWeights), as does a BF16 or F16 tensor (2-byte aligned) whose
// parameter has its dtype (an adapter's frozen base, model.base_precision, built so by
// LoadPretrained), its pages faulted in read-only at once: they are the page
// cache's, shared by every process that maps the file (the ranks of a job on one
// machine), until training writes them;
// each written page then becomes the writer's own (the file never changes). Any other
// tensor (F16, BF16, unaligned) is converted into the parameter, in 16 MiB chunks whose
// mapped pages are dropped from this process once copied. So N ranks loading an F32
// folder of S bytes hold about S between them before training starts, not N x S (with
// the models' DeferInit, models/common.h, which leaves the parameters unwritten until
// loaded); an F16/BF16 folder costs each rank 2S (its float32 parameters).
// NIGHTSHIFT_COPY_WEIGHTS=1 in the environment copies F32 tensors too (the baseline of
// bench/shared_weights_bench.py). A file rewritten in place while a job runs changes the
// parameters' unwritten pages, as with any mapping: replace files by renaming new ones in.
//
// Every error is a PermanentError (errors.h: a restart would meet it again) whose message
// names the file and the key or tensor.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_HF_WEIGHTS_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_HF_WEIGHTS_H_

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/format/safetensors.h"
#include "worker/trainer/models/hf_config.h"

namespace nightshift::trainer {

// Reads dir/config.json (ParseHfConfig, hf_config.h); what is wrong is a PermanentError.
// Every file of the folder (here and in HfWeights) is opened beneath `roots`
// (io::OpenFileBeneath; ModelConfig::data_roots), once; empty: anywhere.
HfConfig ReadHfConfig(const std::string& dir, const std::vector<std::string>& roots = {});

// The weights of a folder, mapped. Tensor names are the checkpoint's.
class HfWeights {
 public:
  // model.safetensors, else model.safetensors.index.json and its shards. Every header is
  // checked (format::ReadSafetensorsHeader) and every name must appear once (in the shard
  // the index names) before any data is touched.
  static HfWeights Open(const std::string& dir, const std::vector<std::string>& roots = {});
  // One safetensors file (our exports' model.safetensors), checked the same way.
  static HfWeights OpenFile(const std::string& path, const std::vector<std::string>& roots = {});

  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  std::vector<int64_t> shape(const std::string& name) const;
  // Copies tensor `name` into `dst` (of the tensor's shape), converting to dst's dtype,
  // then drops its mapped pages. Throws naming the file and the tensor (dtype not F32,
  // F16 or BF16; shape differs from dst's).
  void CopyTo(const std::string& name, torch::Tensor& dst) const;
  // Tensor `name` as a new float32 tensor (tests, small tensors).
  torch::Tensor Float(const std::string& name) const;
  // Makes `param` a view of tensor `name`'s mapped bytes when it can (see the top: a
  // tensor of param's dtype (F32, BF16, F16) and shape, aligned; param a contiguous CPU
  // tensor), else CopyTo (which converts into param's dtype). Returns whether it is a view.
  bool ShareOrCopyTo(const std::string& name, torch::Tensor& param) const;

  struct Mapping;  // one mapped file (hf_weights.cc)

 private:
  // Maps `path` (opened beneath `roots`; its header read from that descriptor) and adds
  // its tensors; `shard_of` (a sharded folder's index): each must be named there, with
  // this file.
  void AddFile(const std::string& path, const std::vector<std::string>& roots,
               const std::map<std::string, std::string>* shard_of);
  struct Entry {
    std::shared_ptr<Mapping> file;
    format::SafetensorsTensor tensor;
  };
  std::string dir_;
  std::map<std::string, Entry> tensors_;
};

// How an architecture's parameter names meet a checkpoint's (nanoGPT's from_pretrained
// table, with transformers' conventions):
struct HfNameRules {
  // The base model's prefix ("bert."): a checkpoint of the bare model (BertModel's, whose
  // names lack it) gets it added.
  std::string base_prefix;
  // Parameter-name prefixes of the classification head: the one part that may be absent
  // from the checkpoint (a pretrained encoder); it is then initialised as transformers
  // initialises it: weights normal(0, initializer_range), biases 0.
  std::vector<std::string> head;
  // Checkpoint-name prefixes that other tasks' heads use (BERT's "cls." pretraining heads,
  // RoBERTa's "lm_head."), and buffers older versions saved (position_ids): dropped.
  std::vector<std::string> ignored;
  double initializer_range = 0.02;
  // Checkpoint-name suffixes dropped too (GPT-2's saved causal-mask buffers, h.N.attn.bias).
  std::vector<std::string> ignored_suffixes;
  // Parameters written before the load (an adapter attached first: its own, and those
  // its init_from folder holds): not loaded, their tensors in the folder left unused.
  std::set<std::string> written;
  // Parameters loaded as if into another dtype first (rounded to it): what an adapter's
  // trainable copy of a half-precision base projection holds when the load is deferred.
  std::map<std::string, torch::ScalarType> round_through;
};

// A new head (every head parameter not in rules.written absent from the folder, or
// ignored by the rules) initialised as transformers initialises one: LoadHfWeights' first
// step, and on its own for a load deferred until after an adapter is attached (whose
// draws then come after the head's, as in a load that is not deferred). Returns their
// names (for rules.written); none when the folder has the head, or part of it
// (LoadHfWeights' error).
std::set<std::string> InitNewHead(const HfWeights& weights, const HfNameRules& rules, torch::nn::Module& model);

// Where tensor `t` is a view of a mapped weight file (ShareOrCopyTo): a fingerprint of the
// file's identity and content (device, inode, size, modification time, a hash of its
// first and last MiB) and of the view's place in it, equal across processes exactly when
// they see the same bytes there (up to hash collisions); nullopt for any other tensor.
// Data parallelism's start (ddp.h) skips broadcasting views the ranks agree on, which
// would write, and so copy, every page of them.
std::optional<uint64_t> MappedWeightFingerprint(const torch::Tensor& t);

// Where `t` is a view of a mapped weight file that is about to be replaced (a copy in
// another dtype): drops the file's pages that lie wholly inside its bytes from this
// process's resident set (MADV_DONTNEED; never a page another tensor shares). Nothing
// otherwise.
void DropMappedPages(const torch::Tensor& t);

// Loads `weights` into `model`'s parameters by name (ShareOrCopyTo); LayerNorm.gamma/beta of old
// checkpoints count as LayerNorm.weight/bias. A checkpoint tensor left over or a
// parameter missing (outside a new head: InitNewHead's, first) is an error listing all of
// them; a shape that differs is an error naming the tensor and both shapes. Parameters in
// rules.written are left as they are (and their tensors in the folder unused). `before`
// (when set) is called with each parameter just before it is loaded, in the model's order
// (sharding full cuts the blocks as the load passes them: FullyShardedAdamW::ShardBefore;
// a new head is outside the blocks).
void LoadHfWeights(const HfWeights& weights, const HfNameRules& rules, torch::nn::Module& model,
                   const std::function<void(const torch::Tensor&)>& before = nullptr);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_HF_WEIGHTS_H_
