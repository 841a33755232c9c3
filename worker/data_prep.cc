#include "worker/data_prep.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "common/io/atomic_file.h"
#include "common/format/json_depth.h"
#include "common/format/shard.h"
#include "common/format/text.h"
#include "common/log.h"
#include "tokenizer/folder.h"

namespace fs = std::filesystem;

namespace nightshift {
namespace {

struct RawSample {
  std::string id;      // stable: "<label>/<file name>" or "<file>:<line>"
  std::string label;   // empty for language models
  std::string path;    // text_dir: the file to read
  std::string text;    // jsonl: the text itself (with data.completion_field: prompt + completion)
  size_t prompt_bytes = 0;  // data.completion_field: the prompt's bytes at the start of text
};

// At most max_bytes of the file at `path`, opened once beneath the data roots
// (io::OpenFileBeneath: a link swapped in after ListInputs checked it is not
// followed out of them).
StatusOr<std::string> ReadFile(const std::vector<std::string>& roots, const std::string& path, size_t max_bytes) {
  std::string s;
  if (std::string error = io::ReadFilePrefixBeneath(roots, path, max_bytes, &s); !error.empty())
    return Status::NotFound("cannot read " + error);
  return s;
}

// The bytes a job reads from data.path, against options.max_input_bytes; shared by the
// threads that read.
class ReadBudget {
 public:
  explicit ReadBudget(const PrepOptions& data) : data_(data) {}
  // Counts `bytes` just read at `where` (a file, or a file and line): past the limit, an
  // error naming it.
  Status Take(uint64_t bytes, const std::string& where) {
    const uint64_t limit = static_cast<uint64_t>(data_.max_input_bytes);
    if (used_.fetch_add(bytes) + bytes <= limit) return Status::OK();
    return Status::InvalidArgument(where + ": data.path " + data_.path + " holds more than the " +
                                   std::to_string(limit) + " bytes this worker reads for one job (its --max-prep-bytes)");
  }

 private:
  const PrepOptions& data_;
  std::atomic<uint64_t> used_{0};
};

// The lines of a file one at a time, none held beyond `max_bytes`: a longer line is
// reported as soon as that many bytes of it are read, not once it is read whole.
class LineReader {
 public:
  enum Result { kLine, kEnd, kTooLong, kError };
  LineReader(std::FILE* file, size_t max_bytes) : file_(file), max_bytes_(max_bytes), buf_(1 << 20) {}
  // The next line, without its '\n', into *line.
  Result Next(std::string* line) {
    line->clear();
    bool any = false;  // a last line without '\n' is a line
    while (true) {
      if (pos_ == end_) {
        pos_ = 0;
        end_ = std::fread(buf_.data(), 1, buf_.size(), file_);
        if (end_ == 0) return std::ferror(file_) ? kError : any ? kLine : kEnd;
      }
      any = true;
      const char* start = buf_.data() + pos_;
      const char* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - pos_));
      const size_t n = newline != nullptr ? static_cast<size_t>(newline - start) : end_ - pos_;
      if (line->size() + n > max_bytes_) return kTooLong;
      line->append(start, n);
      pos_ += n;
      if (newline != nullptr) {
        ++pos_;
        return kLine;
      }
    }
  }

 private:
  std::FILE* file_;
  const size_t max_bytes_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;  // the unread part of buf_
};

Status ReadJsonl(const fs::path& file, const PrepOptions& data, bool with_labels, ReadBudget* budget,
                 std::vector<RawSample>* samples) {
  std::string error;
  const int fd = io::OpenFileBeneath(data.roots, file.string(), &error);  // as ReadFile
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(fd < 0 ? nullptr : ::fdopen(fd, "rb"), &std::fclose);
  if (fd >= 0 && !in) ::close(fd);
  if (!in) return Status::NotFound("cannot read " + (error.empty() ? file.string() : error));
  LineReader lines(in.get(), static_cast<size_t>(data.max_line_bytes));
  std::set<std::string> labels;
  std::string line;
  int64_t n = 0;
  while (true) {
    const LineReader::Result r = lines.Next(&line);
    if (r == LineReader::kEnd) break;
    ++n;
    const std::string where = file.string() + " line " + std::to_string(n);
    if (r == LineReader::kError) return Status::IOError(where + ": cannot be read");
    if (r == LineReader::kTooLong)
      return Status::InvalidArgument(where + " is longer than " + std::to_string(data.max_line_bytes) +
                                     " bytes, the longest line this worker reads");
    NS_RETURN_IF_ERROR(budget->Take(line.size() + 1, where));
    if (line.empty()) continue;
    if (!format::JsonDepthWithin(line))
      return Status::InvalidArgument(where + ": nests deeper than " + std::to_string(format::kMaxJsonDepth) + " levels");
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
    if (!j.contains(data.text_field) || !j[data.text_field].is_string())
      return Status::InvalidArgument(where + ": no string field '" + data.text_field + "' (data.text_field)");
    RawSample s;
    s.id = file.filename().string() + ":" + std::to_string(n);
    s.text = j[data.text_field].get<std::string>();
    if (!data.completion_field.empty()) {
      if (!j.contains(data.completion_field) || !j[data.completion_field].is_string())
        return Status::InvalidArgument(where + ": no string field '" + data.completion_field +
                                       "' (data.completion_field)");
      s.prompt_bytes = s.text.size();
      s.text += j[data.completion_field].get<std::string>();
    }
    if (with_labels) {
      if (!j.contains(data.label_field))
        return Status::InvalidArgument(where + ": no field '" + data.label_field + "' (data.label_field)");
      const auto& l = j[data.label_field];
      s.label = l.is_string() ? l.get<std::string>() : l.dump();
      if (labels.insert(s.label).second && labels.size() > format::kMaxClasses)
        return Status::InvalidArgument(where + ": label '" + s.label.substr(0, 64) + "' is one more than the " +
                                       std::to_string(format::kMaxClasses) +
                                       " distinct labels a classifier may have (data.label_field)");
    }
    samples->push_back(std::move(s));
  }
  return Status::OK();
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs fn(i) for every i in [0, n), on `threads` threads (i strided over them); the
// first error of a thread stops that thread, and the first thread's error is returned.
Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  const int t_count = std::max(1, threads);
  std::vector<Status> results(t_count);
  std::vector<std::thread> pool;
  for (int t = 0; t < t_count; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = t; i < n; i += t_count) {
        Status s = fn(i);
        if (!s.ok()) {
          results[t] = s;
          return;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  for (auto& s : results) NS_RETURN_IF_ERROR(s);
  return Status::OK();
}

// The samples of data.path (sorted by input id); with max_samples, a subset that does
// not depend on file order: the smallest id hashes.
Status ReadSamples(const PrepOptions& data, ReadBudget* budget, std::vector<RawSample>* samples) {
  std::vector<InputFile> inputs;
  NS_RETURN_IF_ERROR(ListInputs(data, &inputs));
  if (data.format == "text_dir") {
    std::set<std::string> labels;  // the sub-folders
    for (const auto& f : inputs) {
      if (data.classifier && labels.insert(f.label).second && labels.size() > format::kMaxClasses)
        return Status::InvalidArgument(fs::path(f.path).parent_path().string() + ": one more label (sub-folder) than the " +
                                       std::to_string(format::kMaxClasses) + " a classifier may have");
      samples->push_back({f.id, f.label, f.path, ""});
    }
  } else {
    NS_RETURN_IF_ERROR(
        ReadJsonl(inputs[0].path, data, data.classifier && !data.label_field.empty(), budget, samples));
  }
  if (samples->empty()) return Status::InvalidArgument("data.path " + data.path + " holds no samples");
  if (data.max_samples > 0 && static_cast<int64_t>(samples->size()) > data.max_samples) {
    std::stable_sort(samples->begin(), samples->end(), [](const RawSample& a, const RawSample& b) {
      return format::StableHash64(a.id) < format::StableHash64(b.id);
    });
    samples->resize(static_cast<size_t>(data.max_samples));
  }
  return Status::OK();
}

// Label ids in name order (*class_names: id -> name). A classifier needs two labels;
// a language model has none.
Status NumberLabels(const PrepOptions& data, const std::vector<RawSample>& samples,
                    std::map<std::string, int>* label_ids, std::vector<std::string>* class_names) {
  if (!data.classifier) return Status::OK();
  for (const auto& s : samples) (*label_ids)[s.label] = 0;
  int next = 0;
  for (auto& [name, id] : *label_ids) {
    id = next++;
    class_names->push_back(name);
  }
  if (label_ids->size() < 2)
    return Status::InvalidArgument("data.path " + data.path + " has " + std::to_string(label_ids->size()) +
                                   " label(s); a classifier needs at least 2");
  return Status::OK();
}

// Each sample's text: at most max_bytes of it; `clean`: valid UTF-8, on one line
// (format::CleanText), else as it is (a Hugging Face tokenizer reads the raw text).
Status ReadTexts(const std::vector<std::string>& roots, const std::vector<RawSample>& samples, size_t max_bytes,
                 bool clean, int threads, ReadBudget* budget, std::vector<std::string>* texts) {
  texts->assign(samples.size(), "");
  return ParallelFor(samples.size(), threads, [&](size_t i) -> Status {
    std::string raw;
    if (!samples[i].path.empty()) {
      auto r = ReadFile(roots, samples[i].path, max_bytes);
      if (!r.ok()) return r.status();
      NS_RETURN_IF_ERROR(budget->Take(r->size(), samples[i].path));
      raw = std::move(r.value());
    } else {
      raw = samples[i].text.substr(0, max_bytes);
    }
    (*texts)[i] = clean ? format::CleanText(raw, max_bytes) : std::move(raw);
    return Status::OK();
  });
}

// Trains the tokenizer (<output_dir>/tokenizer.model) on the training split only, from
// `corpus` (one text per line), and loads it into *sp.
Status TrainTokenizer(const PrepOptions& data, const std::string& corpus, size_t max_bytes, int threads,
                      const std::string& output_dir, sentencepiece::SentencePieceProcessor* sp) {
  const std::string model_prefix = output_dir + "/tokenizer";
  std::ostringstream args;
  args << "--input=" << corpus << " --model_prefix=" << model_prefix
       << " --vocab_size=" << data.vocab_size << " --model_type=unigram"
       << " --character_coverage=1.0 --hard_vocab_limit=false --max_sentence_length=" << max_bytes + 16
       << " --input_sentence_size=200000 --shuffle_input_sentence=true --num_threads=" << std::max(1, threads)
       << " --pad_id=" << kPadId << " --unk_id=" << kUnkId << " --bos_id=" << kBosId << " --eos_id=" << kEosId
       << " --minloglevel=2 --seed_sentencepiece_size=200000";
  auto st = sentencepiece::SentencePieceTrainer::Train(args.str());
  if (!st.ok()) return Status::Internal("tokenizer training failed on " + data.path + ": " + st.ToString());
  std::remove(corpus.c_str());
  st = sp->Load(model_prefix + ".model");
  if (!st.ok()) return Status::Internal("cannot load tokenizer " + model_prefix + ".model: " + st.ToString());
  return Status::OK();
}

// model.init_from: the exported model's tokenizer, copied to <output_dir>/tokenizer.model
// as it is and loaded into *sp.
Status UseTokenizer(const std::string& path, const std::string& output_dir, sentencepiece::SentencePieceProcessor* sp) {
  std::error_code ec;
  std::filesystem::copy_file(path, output_dir + "/tokenizer.model", std::filesystem::copy_options::overwrite_existing,
                             ec);
  if (ec) return Status::InvalidArgument("model.init_from: cannot copy " + path + ": " + ec.message());
  const auto st = sp->Load(output_dir + "/tokenizer.model");
  if (!st.ok()) return Status::InvalidArgument("model.init_from: " + path + " is not a sentencepiece model: " + st.ToString());
  return Status::OK();
}

// Token ids of each text: bos, its pieces, and for a language model eos; at most
// max_len tokens for a classifier, max_len + 1 for a language model (inputs + shifted
// targets).
Status Tokenize(const sentencepiece::SentencePieceProcessor& sp, const std::vector<RawSample>& samples,
                const std::vector<std::string>& texts, const PrepOptions& data, int threads,
                std::vector<std::vector<int32_t>>* ids) {
  const int limit = data.classifier ? data.max_len : data.max_len + 1;
  ids->assign(samples.size(), {});
  return ParallelFor(samples.size(), threads, [&](size_t i) -> Status {
    std::vector<int> pieces;
    auto s = sp.Encode(texts[i], &pieces);
    if (!s.ok()) return Status::Internal("cannot tokenize " + samples[i].id + ": " + s.ToString());
    std::vector<int32_t>& v = (*ids)[i];
    v.push_back(kBosId);
    for (int p : pieces) {
      if (static_cast<int>(v.size()) >= limit) break;
      v.push_back(p);
    }
    if (!data.classifier && static_cast<int>(v.size()) <= data.max_len) v.push_back(kEosId);
    return Status::OK();
  });
}

// model.pretrained: the folder's tokenizer (tokenizer/folder.h: its tokenizer.model, else
// its tokenizer.json) and its special ids: the padding id from config.json's pad_token_id
// (else 1 for roberta, 0 otherwise); bos and eos are the ids the tokenizer puts before and
// after a text ([CLS]/[SEP], <s>/</s>, <|begin_of_text|>), else config.json's bos_token_id /
// eos_token_id (an id or a list of ids: the first), else the padding id.
struct PretrainedTokenizer {
  std::unique_ptr<tokenizer::TextTokenizer> tokenizer;
  int pad_id = 0, bos_id = 0, eos_id = 0;
};

Status LoadPretrainedTokenizer(const PrepOptions& data, PretrainedTokenizer* out) {
  const std::vector<std::string> files = PretrainedInputs(data);  // the tokenizer's file, config.json, ...
  if (tokenizer::Error e = tokenizer::LoadFolder(data.pretrained, &out->tokenizer); !e.empty())
    return Status::InvalidArgument("model.pretrained: " + e);
  std::ifstream in(files[1]);
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return Status::InvalidArgument("model.pretrained: " + files[1] + " is not a JSON object");
  // config.json's `key`: an id, or a list of ids (the first); a negative or too large
  // integer is an error, anything else (absent, null, a string) is no id.
  const auto config_id = [&](const char* key, std::optional<int>* id) -> Status {
    const auto it = config.find(key);
    if (it == config.end() || (it->is_array() && it->empty())) return Status::OK();
    const nlohmann::json& v = it->is_array() ? it->front() : *it;
    if (!v.is_number_integer()) return Status::OK();
    if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX))
      return Status::InvalidArgument("model.pretrained: " + files[1] + ": " + key + " " + it->dump() +
                                     " is not a token id");
    *id = static_cast<int>(v.get<uint64_t>());
    return Status::OK();
  };
  std::optional<int> pad, bos, eos;
  NS_RETURN_IF_ERROR(config_id("pad_token_id", &pad));
  NS_RETURN_IF_ERROR(config_id("bos_token_id", &bos));
  NS_RETURN_IF_ERROR(config_id("eos_token_id", &eos));
  const auto type = config.find("model_type");  // (json::value would throw on a non-string)
  const bool roberta = type != config.end() && *type == "roberta";  // transformers' defaults
  out->pad_id = pad.value_or(roberta ? 1 : 0);
  const std::vector<int32_t> before = out->tokenizer->IdsBefore(), after = out->tokenizer->IdsAfter();
  out->bos_id = !before.empty() ? before.front() : bos.value_or(out->pad_id);
  out->eos_id = !after.empty() ? after.back() : eos.value_or(out->pad_id);
  return Status::OK();
}

// The ids tokenizer(text, truncation=True, max_length=max_len) gives. A language model's
// sample (model.task causal_lm) ends with eos when there is room, as TRL's SFT trainer
// adds it; with a prompt (the first prompt_bytes of its text), (*prompt_tokens)[i] is the
// length of tokenizer(prompt): the ids the loss does not count (written as the sample's
// label in the shard).
Status TokenizePretrained(const tokenizer::TextTokenizer& tok, const std::vector<std::string>& texts,
                          const std::vector<RawSample>& samples, const PrepOptions& data, int eos_id, int threads,
                          std::vector<std::vector<int32_t>>* ids, std::vector<int32_t>* prompt_tokens) {
  ids->assign(texts.size(), {});
  prompt_tokens->assign(texts.size(), 0);
  return ParallelFor(texts.size(), threads, [&](size_t i) -> Status {
    std::vector<int32_t>& v = (*ids)[i] = tok.Encode(texts[i], static_cast<size_t>(data.max_len));
    if (data.classifier) return Status::OK();
    if (static_cast<int>(v.size()) < data.max_len && (v.empty() || v.back() != eos_id)) v.push_back(eos_id);
    if (samples[i].prompt_bytes > 0) {
      // The prompt's own ids and the specials before them (Llama's bos), not those after.
      const size_t prompt = tok.Encode(std::string_view(texts[i]).substr(0, samples[i].prompt_bytes)).size() -
                            tok.IdsAfter().size();
      (*prompt_tokens)[i] = static_cast<int32_t>(std::min(prompt, v.size()));
    }
    return Status::OK();
  });
}

// The train and val shards, and the counts in *out.
// A language model's label is its prompt's length in tokens (prompt_tokens; empty: -1).
Status WriteShards(const PrepOptions& data, const std::vector<RawSample>& samples,
                   const std::map<std::string, int>& label_ids, const std::vector<bool>& is_val,
                   const std::vector<std::vector<int32_t>>& ids, const std::vector<int32_t>& prompt_tokens,
                   const std::string& output_dir, PreparedData* out) {
  const uint32_t num_classes = static_cast<uint32_t>(out->class_names.size());
  format::ShardWriter train(out->vocab_size, num_classes), val(out->vocab_size, num_classes);
  for (size_t i = 0; i < samples.size(); ++i) {
    int32_t label = data.classifier ? label_ids.at(samples[i].label) : prompt_tokens.empty() ? -1 : prompt_tokens[i];
    (is_val[i] ? val : train).Add(format::StableHash64(samples[i].id), label, ids[i]);
  }
  if (train.num_samples() == 0) return Status::InvalidArgument("data.validation_fraction leaves no training samples");
  std::string err = train.WriteFile(output_dir + "/" + kTrainShard);
  if (err.empty()) err = val.WriteFile(output_dir + "/" + kValShard);
  if (!err.empty()) return Status::IOError(err);
  out->train_samples = train.num_samples();
  out->val_samples = val.num_samples();
  out->train_tokens = train.num_tokens();
  for (const auto& v : ids) {
    size_t bucket = 0;
    while ((size_t{2} << bucket) <= v.size()) ++bucket;
    if (out->length_histogram.size() <= bucket) out->length_histogram.resize(bucket + 1);
    out->length_histogram[bucket]++;
  }
  return Status::OK();
}

Status WriteMeta(const PreparedData& out, int pad_id, int bos_id, int eos_id, const std::string& output_dir) {
  nlohmann::json meta = {{"vocab_size", out.vocab_size},
                         {"train_samples", out.train_samples},
                         {"val_samples", out.val_samples},
                         {"train_tokens", out.train_tokens},
                         {"class_names", out.class_names},
                         {"length_histogram", out.length_histogram},
                         {"num_classes", out.class_names.size()},
                         {"pad_id", pad_id},
                         {"bos_id", bos_id},
                         {"eos_id", eos_id}};
  std::string err = io::WriteFileAtomically(output_dir + "/" + kMetaFile, meta.dump(1));
  return err.empty() ? Status::OK() : Status::IOError(err);
}

// The limits on what is read (PrepOptions::max_line_bytes, max_input_bytes) must be positive.
Status CheckReadLimits(const PrepOptions& data) {
  if (data.max_line_bytes >= 1 && data.max_input_bytes >= 1) return Status::OK();
  return Status::InvalidArgument("max_line_bytes " + std::to_string(data.max_line_bytes) + " and max_input_bytes " +
                                 std::to_string(data.max_input_bytes) + " must be at least 1");
}

}  // namespace

StatusOr<PreparedData> PrepareData(const PrepOptions& data, const std::string& output_dir, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  PreparedData out;
  NS_RETURN_IF_ERROR(CheckReadLimits(data));
  ReadBudget budget(data);
  std::vector<RawSample> samples;
  NS_RETURN_IF_ERROR(ReadSamples(data, &budget, &samples));
  std::map<std::string, int> label_ids;
  NS_RETURN_IF_ERROR(NumberLabels(data, samples, &label_ids, &out.class_names));
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) return Status::IOError("cannot create " + output_dir + ": " + ec.message());

  // Most of the time is reading and tokenizing: both run on `threads` threads. A Hugging
  // Face tokenizer gets more of the raw text (up to 64 bytes per kept token): its ids of a
  // prefix equal those of the whole text up to the word the prefix cuts.
  auto phase = std::chrono::steady_clock::now();
  const bool pretrained = !data.pretrained.empty();
  const size_t max_bytes =
      static_cast<size_t>(data.max_len) * (pretrained ? format::kRawBytesPerToken : format::kCleanBytesPerToken);
  std::vector<std::string> texts;
  NS_RETURN_IF_ERROR(ReadTexts(data.roots, samples, max_bytes, /*clean=*/!pretrained, threads, &budget, &texts));
  std::vector<bool> is_val(samples.size());
  for (size_t i = 0; i < samples.size(); ++i)
    is_val[i] = format::InValidationSplit(samples[i].id, data.seed, data.validation_fraction);
  out.read_seconds = Since(phase);

  std::vector<std::vector<int32_t>> ids;
  std::vector<int32_t> prompt_tokens;  // language models with data.completion_field
  int pad_id = kPadId, bos_id = kBosId, eos_id = kEosId;
  if (pretrained) {
    phase = std::chrono::steady_clock::now();
    PretrainedTokenizer tok;
    NS_RETURN_IF_ERROR(LoadPretrainedTokenizer(data, &tok));
    out.vocab_size = static_cast<int>(tok.tokenizer->VocabSize());
    pad_id = tok.pad_id, bos_id = tok.bos_id, eos_id = tok.eos_id;
    out.tokenizer_seconds = Since(phase);
    phase = std::chrono::steady_clock::now();
    NS_RETURN_IF_ERROR(TokenizePretrained(*tok.tokenizer, texts, samples, data, eos_id, threads, &ids, &prompt_tokens));
    out.tokenize_seconds = Since(phase);
  } else {
    phase = std::chrono::steady_clock::now();
    const std::string corpus = output_dir + "/tokenizer-corpus.txt";
    {
      std::ofstream f(corpus, std::ios::binary);
      for (size_t i = 0; i < texts.size(); ++i)
        if (!is_val[i] && !texts[i].empty()) f << texts[i] << '\n';
    }
    sentencepiece::SentencePieceProcessor sp;
    if (data.tokenizer_model.empty()) {
      NS_RETURN_IF_ERROR(TrainTokenizer(data, corpus, max_bytes, threads, output_dir, &sp));
    } else {
      NS_RETURN_IF_ERROR(UseTokenizer(data.tokenizer_model, output_dir, &sp));
      std::remove(corpus.c_str());
    }
    out.vocab_size = sp.GetPieceSize();
    out.tokenizer_seconds = Since(phase);
    phase = std::chrono::steady_clock::now();
    NS_RETURN_IF_ERROR(Tokenize(sp, samples, texts, data, threads, &ids));
    out.tokenize_seconds = Since(phase);
  }

  NS_RETURN_IF_ERROR(WriteShards(data, samples, label_ids, is_val, ids, prompt_tokens, output_dir, &out));
  for (const auto& t : texts) out.input_bytes += t.size();
  NS_RETURN_IF_ERROR(WriteMeta(out, pad_id, bos_id, eos_id, output_dir));
  out.seconds = Since(t0);
  NS_INFO("data: prepared " << data.path << " in " << out.seconds << " s: " << out.train_samples
                            << " train / " << out.val_samples << " val samples, vocabulary " << out.vocab_size);
  return out;
}

}  // namespace nightshift
