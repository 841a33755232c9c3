#include "worker/data_prep.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/format/atomic_file.h"
#include "common/format/shard.h"
#include "common/log.h"

namespace fs = std::filesystem;

namespace nightshift {
namespace {

// Bump when the output of preparation changes for the same inputs.
constexpr int kPreprocessorVersion = 1;

struct RawSample {
  std::string id;      // stable: "<label>/<file name>" or "<file>:<line>"
  std::string label;   // empty for language models
  std::string path;    // text_dir: the file to read
  std::string text;    // jsonl: the text itself
};

// Replaces bytes that are not valid UTF-8 with '?', so the tokenizer sees valid text
// (mail bodies are often Latin-1).
std::string SanitizeUtf8(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    unsigned char c = in[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= in.size();
    for (int k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(in[i + k]) >> 6) == 2;
    if (ok && c != 0) {
      out.append(in, i, n);
      i += n;
    } else {
      out.push_back('?');
      ++i;
    }
  }
  return out;
}

StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::string s(max_bytes, '\0');
  in.read(&s[0], static_cast<std::streamsize>(max_bytes));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

Status ListTextDir(const fs::path& root, std::vector<RawSample>* samples, std::string* fingerprint) {
  std::vector<fs::path> labels;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) labels.push_back(e.path());
  std::sort(labels.begin(), labels.end());
  if (labels.empty())
    return Status::InvalidArgument("data.path " + root.string() +
                                   " has no sub-folders: format text_dir needs one folder per label");
  for (const auto& dir : labels) {
    std::vector<fs::directory_entry> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e);
    std::sort(files.begin(), files.end(),
              [](const auto& a, const auto& b) { return a.path() < b.path(); });
    const std::string label = dir.filename().string();
    for (const auto& f : files) {
      RawSample s;
      s.label = label;
      s.id = label + "/" + f.path().filename().string();
      s.path = f.path().string();
      struct stat st;
      if (::stat(s.path.c_str(), &st) == 0) {
        *fingerprint += s.id + ":" + std::to_string(st.st_size) + ":" +
                        std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
      }
      samples->push_back(std::move(s));
    }
  }
  return Status::OK();
}

Status ReadJsonl(const fs::path& file, const PrepOptions& data, bool with_labels,
                 std::vector<RawSample>* samples, std::string* fingerprint) {
  std::ifstream in(file);
  if (!in) return Status::NotFound("cannot read " + file.string());
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string where = file.string() + " line " + std::to_string(n);
    if (!j.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
    if (!j.contains(data.text_field) || !j[data.text_field].is_string())
      return Status::InvalidArgument(where + ": no string field '" + data.text_field + "' (data.text_field)");
    RawSample s;
    s.id = file.filename().string() + ":" + std::to_string(n);
    s.text = j[data.text_field].get<std::string>();
    if (with_labels) {
      if (!j.contains(data.label_field))
        return Status::InvalidArgument(where + ": no field '" + data.label_field + "' (data.label_field)");
      const auto& l = j[data.label_field];
      s.label = l.is_string() ? l.get<std::string>() : l.dump();
    }
    samples->push_back(std::move(s));
  }
  struct stat st;
  if (::stat(file.c_str(), &st) == 0)
    *fingerprint += file.string() + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + ";";
  return Status::OK();
}

std::string Hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

StatusOr<PreparedData> PrepareData(const PrepOptions& data, const std::string& cache_root, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool classifier = data.classifier;
  const int max_len = data.max_len;
  std::error_code ec;
  fs::path root = fs::absolute(data.path, ec);
  if (ec || !fs::exists(root))
    return Status::NotFound("data.path '" + data.path + "' does not exist on this worker (resolved to " +
                            root.string() + ")");

  std::vector<RawSample> samples;
  std::string fingerprint;
  if (data.format == "text_dir") {
    if (!fs::is_directory(root)) return Status::InvalidArgument("data.path " + root.string() + " is not a folder (format text_dir)");
    NS_RETURN_IF_ERROR(ListTextDir(root, &samples, &fingerprint));
  } else {
    NS_RETURN_IF_ERROR(ReadJsonl(root, data, classifier && !data.label_field.empty(), &samples, &fingerprint));
  }
  if (samples.empty()) return Status::InvalidArgument("data.path " + root.string() + " holds no samples");
  if (data.max_samples > 0 && static_cast<int64_t>(samples.size()) > data.max_samples) {
    // A deterministic subset that does not depend on file order: smallest id hashes.
    std::stable_sort(samples.begin(), samples.end(), [](const RawSample& a, const RawSample& b) {
      return format::StableHash64(a.id) < format::StableHash64(b.id);
    });
    samples.resize(static_cast<size_t>(data.max_samples));
  }

  // The key covers everything that changes the output.
  std::ostringstream opts;
  opts << "v" << kPreprocessorVersion << "|" << data.format << "|" << data.text_field << "|"
       << data.label_field << "|" << data.max_samples << "|" << data.validation_fraction << "|"
       << data.seed << "|" << "sentencepiece-unigram" << "|" << data.vocab_size
       << "|" << max_len << "|" << classifier << "|" << fingerprint;
  const std::string key = Hex(format::StableHash64(opts.str()));
  PreparedData out;
  out.dir = (fs::path(cache_root) / key).string();
  out.train_shard = out.dir + "/train.shard";
  out.val_shard = out.dir + "/val.shard";
  const std::string meta_path = out.dir + "/meta.json";

  std::map<std::string, int> label_ids;
  for (const auto& s : samples) if (classifier) label_ids[s.label] = 0;
  int next = 0;
  for (auto& [name, id] : label_ids) {
    id = next++;
    out.class_names.push_back(name);
  }
  if (classifier && label_ids.size() < 2)
    return Status::InvalidArgument("data.path " + root.string() + " has " + std::to_string(label_ids.size()) +
                                   " label(s); a classifier needs at least 2");

  // Reuse a complete earlier result (the meta file is written last).
  if (fs::exists(meta_path)) {
    std::ifstream in(meta_path);
    nlohmann::json meta = nlohmann::json::parse(in, nullptr, false);
    if (meta.is_object() && meta.value("key", "") == key) {
      out.vocab_size = meta.value("vocab_size", 0);
      out.train_samples = meta.value("train_samples", 0ULL);
      out.val_samples = meta.value("val_samples", 0ULL);
      out.train_tokens = meta.value("train_tokens", 0ULL);
      out.reused = true;
      out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return out;
    }
  }
  fs::create_directories(out.dir, ec);
  if (ec) return Status::IOError("cannot create " + out.dir + ": " + ec.message());

  // Read texts (in parallel: most of the time is file reading and tokenizing).
  const size_t max_bytes = static_cast<size_t>(max_len) * 16;  // enough bytes for max_len tokens
  std::vector<std::string> texts(samples.size());
  std::vector<bool> is_val(samples.size());
  for (size_t i = 0; i < samples.size(); ++i)
    is_val[i] = format::InValidationSplit(samples[i].id, data.seed, data.validation_fraction);
  auto parallel_for = [&](const std::function<Status(size_t)>& fn) -> Status {
    int n = std::max(1, threads);
    std::vector<Status> results(n);
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t) {
      pool.emplace_back([&, t] {
        for (size_t i = t; i < samples.size(); i += n) {
          Status s = fn(i);
          if (!s.ok()) { results[t] = s; return; }
        }
      });
    }
    for (auto& th : pool) th.join();
    for (auto& s : results) NS_RETURN_IF_ERROR(s);
    return Status::OK();
  };
  NS_RETURN_IF_ERROR(parallel_for([&](size_t i) -> Status {
    std::string raw;
    if (!samples[i].path.empty()) {
      auto r = ReadFile(samples[i].path, max_bytes);
      if (!r.ok()) return r.status();
      raw = std::move(r.value());
    } else {
      raw = samples[i].text.substr(0, max_bytes);
    }
    std::string clean = SanitizeUtf8(raw);
    for (char& c : clean) if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    texts[i] = std::move(clean);
    return Status::OK();
  }));

  // Tokenizer: trained on the training split only.
  const std::string corpus = out.dir + "/tokenizer-corpus.txt";
  {
    std::ofstream f(corpus, std::ios::binary);
    for (size_t i = 0; i < texts.size(); ++i)
      if (!is_val[i] && !texts[i].empty()) f << texts[i] << '\n';
  }
  const std::string model_prefix = out.dir + "/tokenizer";
  std::ostringstream args;
  args << "--input=" << corpus << " --model_prefix=" << model_prefix
       << " --vocab_size=" << data.vocab_size << " --model_type=unigram"
       << " --character_coverage=1.0 --hard_vocab_limit=false --max_sentence_length=" << max_bytes + 16
       << " --input_sentence_size=200000 --shuffle_input_sentence=true --num_threads=" << std::max(1, threads)
       << " --pad_id=" << kPadId << " --unk_id=" << kUnkId << " --bos_id=" << kBosId << " --eos_id=" << kEosId
       << " --minloglevel=2 --seed_sentencepiece_size=200000";
  auto st = sentencepiece::SentencePieceTrainer::Train(args.str());
  if (!st.ok()) return Status::Internal("tokenizer training failed on " + root.string() + ": " + st.ToString());
  std::remove(corpus.c_str());
  sentencepiece::SentencePieceProcessor sp;
  st = sp.Load(model_prefix + ".model");
  if (!st.ok()) return Status::Internal("cannot load tokenizer " + model_prefix + ".model: " + st.ToString());
  out.vocab_size = sp.GetPieceSize();

  std::vector<std::vector<int32_t>> ids(samples.size());
  NS_RETURN_IF_ERROR(parallel_for([&](size_t i) -> Status {
    std::vector<int> pieces;
    auto s = sp.Encode(texts[i], &pieces);
    if (!s.ok()) return Status::Internal("cannot tokenize " + samples[i].id + ": " + s.ToString());
    std::vector<int32_t>& v = ids[i];
    v.push_back(kBosId);
    for (int p : pieces) {
      if (static_cast<int>(v.size()) >= (classifier ? max_len : max_len + 1)) break;
      v.push_back(p);
    }
    if (!classifier && static_cast<int>(v.size()) <= max_len) v.push_back(kEosId);
    return Status::OK();
  }));

  const uint32_t num_classes = static_cast<uint32_t>(out.class_names.size());
  format::ShardWriter train(out.vocab_size, num_classes), val(out.vocab_size, num_classes);
  for (size_t i = 0; i < samples.size(); ++i) {
    int32_t label = classifier ? label_ids[samples[i].label] : -1;
    (is_val[i] ? val : train).Add(format::StableHash64(samples[i].id), label, ids[i]);
  }
  if (train.num_samples() == 0) return Status::InvalidArgument("data.validation_fraction leaves no training samples");
  std::string err = train.WriteFile(out.train_shard);
  if (err.empty()) err = val.WriteFile(out.val_shard);
  if (!err.empty()) return Status::IOError(err);
  out.train_samples = train.num_samples();
  out.val_samples = val.num_samples();
  out.train_tokens = train.num_tokens();

  nlohmann::json meta = {{"key", key},
                         {"vocab_size", out.vocab_size},
                         {"train_samples", out.train_samples},
                         {"val_samples", out.val_samples},
                         {"train_tokens", out.train_tokens},
                         {"class_names", out.class_names},
                         {"train_shard", out.train_shard},
                         {"val_shard", out.val_shard},
                         {"num_classes", out.class_names.size()},
                         {"pad_id", kPadId},
                         {"bos_id", kBosId},
                         {"eos_id", kEosId}};
  err = format::WriteFileAtomically(meta_path, meta.dump(1));
  if (!err.empty()) return Status::IOError(err);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  NS_INFO("data: prepared " << root.string() << " in " << out.seconds << " s: " << out.train_samples
                            << " train / " << out.val_samples << " val samples, vocabulary " << out.vocab_size);
  return out;
}

}  // namespace nightshift
