// Fine-tuning a Hugging Face folder through the service (issue 27), with the real binaries
// on loopback: small BERT, RoBERTa and DistilBERT folders made by tests/support/hf_folders.py
// (transformers' save_pretrained, tokenizers trained on the corpus; no download), SpamAssassin
// as the data. Each job SUCCEEDS and its model downloads with `nightshift job artifacts`;
// pretrained_check.py then loads it in transformers and compares its predictions with
// `nightshift predict`'s. A bad folder fails the job at once (a user error: no restart),
// naming the key or file; the feature cache keys on the tokenizer's files. Issue 30: GPT-2,
// Llama 3 and Qwen2 folders as classifiers and causal LMs, the same way.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/model_folder.h"
#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

const std::string kSource = NIGHTSHIFT_SOURCE_DIR;
const std::string kCorpus = kSource + "/data/spamassassin";

std::string Spec(const std::string& folder, const std::string& extra = "") {
  return "name: pretrained-e2e\n"
         "model: {pretrained: " + folder + ", max_len: 64}\n"
         "data: {path: " + kCorpus + ", max_samples: 240}\n"
         "train: {epochs: 1, lr: 0.001, warmup_steps: 2, batching: {batch_size: 16}, threads: 1}\n"
         "restart: {max_restarts: 2}\n" + extra;
}

// The folders, made once for the whole program (about 10 s).
const std::string& Models() {
  static const std::string dir = [] {
    const std::string d = ::testing::TempDir() + "/nightshift-pretrained-models-" + std::to_string(::getpid());
    fs::remove_all(d);
    std::string out;
    const std::string cmd = std::string(NIGHTSHIFT_PYTHON) + " " + kSource + "/tests/support/hf_folders.py " + d + " " + kCorpus;
    EXPECT_EQ(Cluster::Shell(cmd, &out), 0) << cmd << "\n" << out;
    // save_pretrained writes model.safetensors 0600; a root worker's jobs run as another
    // user, which must be able to read the folders jobs name (docs/security.md).
    EXPECT_EQ(Cluster::Shell("chmod -R a+rX " + d, &out), 0) << out;
    return d;
  }();
  return dir;
}

class PretrainedE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kCorpus + "/ham")) GTEST_SKIP() << "no corpus at " << kCorpus << ": run scripts/fetch-data.sh";
    ASSERT_TRUE(fs::exists(Models() + "/bert/config.json"));
  }
  // A worker confined to the corpus and the models folder.
  void Start(Cluster& cluster, int slots = 1) {
    cluster.StartCoordinator();
    cluster.StartWorker("w1", slots, {}, {"--data-root", kCorpus, "--data-root", Models()});
  }
};

TEST_F(PretrainedE2eTest, EachEncoderFineTunesAndComesBackInItsOwnLayout) {
  Cluster cluster("pretrained");
  Start(cluster);
  const std::string dl = cluster.dir() + "/downloads";
  for (const char* arch : {"bert", "roberta", "distilbert"}) {
    SCOPED_TRACE(arch);
    v1::Job job;
    ASSERT_TRUE(cluster.Submit(Spec(Models() + "/" + arch), &job).ok());
    job = cluster.WaitForEnd(job.id(), 300);
    ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
    EXPECT_EQ(job.spec().model().arch(), "pretrained");
    EXPECT_GT(job.metrics().at("val_accuracy"), 0.5);
    std::string out;
    ASSERT_EQ(cluster.Cli({"job", "artifacts", job.id(), "--output", dl + "/" + arch}, &out), 0) << out;
    EXPECT_TRUE(VerifyModelFolder(dl + "/" + arch).ok());
    if (std::string(arch) == "bert") {  // a kept checkpoint, exported on request, the same layout
      const std::string step = std::to_string(job.progress().step());
      ASSERT_EQ(cluster.Cli({"job", "artifacts", job.id(), "--step", step, "--output", dl + "/bert-step"}, &out), 0)
          << out;
      EXPECT_TRUE(VerifyModelFolder(dl + "/bert-step").ok());
      EXPECT_EQ(ModelFolderStep(dl + "/bert-step"), job.progress().step());
    }
  }
  // transformers loads each (labels ham/spam) and predicts what nightshift predict does.
  std::string out;
  const std::string cmd = std::string(NIGHTSHIFT_PYTHON) + " " + kSource + "/tests/e2e/pretrained_check.py " +
                          NIGHTSHIFT_BIN_DIR + " " + kCorpus + " " + dl + "/bert " + dl + "/roberta " + dl +
                          "/distilbert " + dl + "/bert-step";
  EXPECT_EQ(Cluster::Shell(cmd, &out), 0) << cmd << "\n" << out;
  for (const char* folder : {"bert", "roberta", "distilbert", "bert-step"})
    EXPECT_NE(out.find("ok " + dl + "/" + folder + ": 24 mails"), std::string::npos) << out;
}

// The decoder folders (tests/support/hf_folders.py make_decoders: GPT-2, Llama 3 and Qwen2 layouts,
// tokenizers trained on the corpus), made once.
const std::string& Decoders() {
  static const std::string dir = [] {
    const std::string d = Models() + "/decoders";
    std::string out;
    const std::string cmd = std::string(NIGHTSHIFT_PYTHON) + " " + kSource + "/tests/support/hf_folders.py " + d + " " +
                            kCorpus + " --kinds gpt2,llama3,qwen2 --kv-heads 2 --ffn 64";
    EXPECT_EQ(Cluster::Shell(cmd, &out), 0) << cmd << "\n" << out;
    // save_pretrained writes model.safetensors 0600; a root worker's jobs run as another
    // user, which must be able to read the folders jobs name (docs/security.md).
    EXPECT_EQ(Cluster::Shell("chmod -R a+rX " + d, &out), 0) << out;
    return d;
  }();
  return dir;
}

// SpamAssassin as prompt / completion pairs: each mail's Subject line, then its body.
std::string SubjectBodyPairs(const std::string& path, size_t n) {
  std::ofstream out(path, std::ios::trunc);
  size_t written = 0;
  for (const auto& e : fs::recursive_directory_iterator(kCorpus)) {
    if (written == n) break;
    if (!e.is_regular_file()) continue;
    const std::string mail = ReadAll(e.path().string());
    const size_t subject = mail.find("\nSubject:"), body = mail.find("\n\n");
    if (subject == std::string::npos || body == std::string::npos || subject > body) continue;
    const size_t end = mail.find('\n', subject + 1);
    std::string prompt = mail.substr(subject + 1, end - subject - 1) + "\n";
    // Valid UTF-8 for JSON: bytes above 0x7f become '?' (these mails are mostly ASCII).
    std::string completion = mail.substr(body + 2, 2000);
    for (std::string* t : {&prompt, &completion})
      for (char& c : *t)
        if (static_cast<unsigned char>(c) > 0x7f) c = '?';
    out << nlohmann::json{{"prompt", prompt}, {"completion", completion}}.dump() << "\n";
    ++written;
  }
  return path;
}

// GPT-2, Llama 3 and Qwen2 layouts, each fine-tuned as a classifier (a new score head for
// ham/spam) and as a causal LM (plain mails, packed; Llama's on subject/body pairs), through
// the service: every job SUCCEEDS, its export downloads, and hf_decoder_check.py loads it in
// transformers: the classifiers' logits, the language models' greedy continuations and
// perplexities equal nightshift predict's.
TEST_F(PretrainedE2eTest, EachDecoderFineTunesAsAClassifierAndAsALanguageModel) {
  Cluster cluster("pretrained-decoders");
  Start(cluster);
  const std::string dl = cluster.dir() + "/downloads";
  const std::string pairs = SubjectBodyPairs(Decoders() + "/pairs.jsonl", 120);
  std::vector<std::string> exports;
  for (const char* kind : {"gpt2", "llama3", "qwen2"}) {
    for (const std::string task : {"classification", "causal_lm"}) {
      SCOPED_TRACE(std::string(kind) + " " + task);
      const std::string folder = Decoders() + "/" + kind;
      const bool with_pairs = task == "causal_lm" && std::string(kind) == "llama3";
      const std::string spec =
          "name: decoder-e2e\n"
          "model: {pretrained: " + folder + ", task: " + task + ", max_len: 64}\n" +
          (with_pairs ? "data: {format: jsonl, path: " + pairs + ", text_field: prompt, completion_field: completion}\n"
                      : "data: {path: " + kCorpus + ", max_samples: 160}\n") +
          "train: {epochs: 1, lr: 0.001, warmup_steps: 2, batching: {max_tokens: 512}, threads: 1}\n"
          "restart: {max_restarts: 2}\n";
      v1::Job job;
      ASSERT_TRUE(cluster.Submit(spec, &job).ok());
      job = cluster.WaitForEnd(job.id(), 300);
      ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
      EXPECT_EQ(job.spec().train().batching().rows(), task == "causal_lm" ? "packed" : "padded");
      if (task == "causal_lm") {
        EXPECT_GT(job.metrics().at("val_perplexity"), 1.0);
      } else {
        EXPECT_GT(job.metrics().at("val_accuracy"), 0.5);
      }
      const std::string out_dir = dl + "/" + kind + "-" + task;
      std::string out;
      ASSERT_EQ(cluster.Cli({"job", "artifacts", job.id(), "--output", out_dir}, &out), 0) << out;
      EXPECT_TRUE(VerifyModelFolder(out_dir).ok());
      exports.push_back(out_dir);
    }
  }
  std::string cmd = std::string(NIGHTSHIFT_PYTHON) + " " + kSource + "/tests/worker/predict/hf_decoder_check.py check " +
                    NIGHTSHIFT_BIN_DIR + "/nightshift-predict " + kCorpus;
  for (const std::string& e : exports) cmd += " " + e;
  std::string out;
  EXPECT_EQ(Cluster::Shell(cmd, &out), 0) << cmd << "\n" << out;
  for (const std::string& e : exports) EXPECT_NE(out.find("ok " + e + ":"), std::string::npos) << out;
}

// Same folder, same data: a cache hit; another tokenizer.json: a miss.
TEST_F(PretrainedE2eTest, TheFeatureCacheKeysOnTheTokenizersFiles) {
  Cluster cluster("pretrained-cache");
  Start(cluster);
  const std::string copy = Models() + "/bert-cache";
  fs::remove_all(copy);
  fs::copy(Models() + "/bert", copy);
  v1::Job a, b, c;
  ASSERT_TRUE(cluster.Submit(Spec(copy), &a).ok());
  a = cluster.WaitForEnd(a.id(), 300);
  ASSERT_EQ(a.state(), v1::SUCCEEDED) << a.reason();
  EXPECT_FALSE(a.data_cache().hit());
  ASSERT_TRUE(cluster.Submit(Spec(copy), &b).ok());
  b = cluster.WaitForEnd(b.id(), 300);
  ASSERT_EQ(b.state(), v1::SUCCEEDED) << b.reason();
  EXPECT_TRUE(b.data_cache().hit());
  EXPECT_EQ(b.data_cache().key(), a.data_cache().key());
  // The same vocabulary, lower-casing off: other ids for the same texts.
  std::string text = ReadAll(copy + "/tokenizer.json");
  const size_t at = text.find("\"lowercase\": true");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 17, "\"lowercase\": false");
  std::ofstream(copy + "/tokenizer.json", std::ios::trunc) << text;
  ASSERT_TRUE(cluster.Submit(Spec(copy), &c).ok());
  c = cluster.WaitForEnd(c.id(), 300);
  ASSERT_EQ(c.state(), v1::SUCCEEDED) << c.reason();
  EXPECT_FALSE(c.data_cache().hit());
  EXPECT_NE(c.data_cache().key(), a.data_cache().key());
}

// Each fails the job on its first attempt (max_restarts 2 is not spent), naming the cause.
TEST_F(PretrainedE2eTest, ABadFolderFailsTheJobAtOnceNamingTheCause) {
  Cluster cluster("pretrained-bad");
  Start(cluster);
  const auto broken = [&](const std::string& name, const std::function<void(const std::string&)>& breaks) {
    const std::string dir = Models() + "/" + name;
    fs::remove_all(dir);
    fs::copy(Models() + "/distilbert", dir);
    breaks(dir);
    return dir;
  };
  const auto replace = [](const std::string& file, const std::string& from, const std::string& to) {
    std::string text = ReadAll(file);
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(file, std::ios::trunc) << text;
  };
  const std::string outside = cluster.dir() + "/outside";
  fs::copy(Models() + "/bert", outside);
  // Inside the root, its weights a link to another folder's outside it: the folder passes
  // the worker's check, the trainer's open beneath the roots refuses the link.
  const std::string linked = broken("linked-weights", [&](const std::string& d) {
    fs::remove(d + "/model.safetensors");
    fs::create_symlink(outside + "/model.safetensors", d + "/model.safetensors");
  });
  const std::pair<std::string, std::string> cases[] = {
      {broken("gpt-neo", [&](const std::string& d) { replace(d + "/config.json", "\"distilbert\"", "\"gpt_neo\""); }),
       "model_type \"gpt_neo\" is not supported"},
      {broken("relu", [&](const std::string& d) { replace(d + "/config.json", "\"gelu\"", "\"relu\""); }),
       "activation"},
      {broken("no-tokenizer", [](const std::string& d) { fs::remove(d + "/tokenizer.json"); }), "tokenizer.json"},
      {broken("lying-header",
              [](const std::string& d) {
                std::fstream f(d + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
                f.put('\xff');  // the header's length, now beyond the file
              }),
       "model.safetensors"},
      {outside, "model.pretrained"},
      {linked, "model.safetensors leads out of the data roots"},
  };
  for (const auto& [folder, expected] : cases) {
    SCOPED_TRACE(folder);
    v1::Job job;
    ASSERT_TRUE(cluster.Submit(Spec(folder), &job).ok());
    job = cluster.WaitForEnd(job.id(), 120);
    EXPECT_EQ(job.state(), v1::FAILED);
    EXPECT_NE(job.reason().find(expected), std::string::npos) << job.reason();
    EXPECT_EQ(job.restarts(), 0) << job.reason();
  }
  // Sizes the spec sets that config.json does not have.
  v1::Job job;
  const std::string sized = "name: sized\nmodel: {pretrained: " + Models() + "/bert, layers: 4}\ndata: {path: " +
                            kCorpus + ", max_samples: 40}\n";
  ASSERT_TRUE(cluster.Submit(sized, &job).ok());
  job = cluster.WaitForEnd(job.id(), 120);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_NE(job.reason().find("model.layers: 4 differs from"), std::string::npos) << job.reason();
}

}  // namespace
}  // namespace nightshift::testing_e2e
