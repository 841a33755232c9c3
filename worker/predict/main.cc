// nightshift-predict: runs a model folder in C++ (worker/predict/predict.h): our export
// (worker/trainer/checkpoint/export.h) or any Hugging Face BERT, RoBERTa or DistilBERT classifier folder.
//
//   nightshift-predict --model DIR [FILE... | -] [--jsonl [--text-field F]] [-o text|json]
//       classifier: one line per input: its name, the label, the class probabilities.
//       Inputs: each FILE is one text (like a text_dir sample); `-` (or no FILE) reads
//       stdin, one text per line; --jsonl: every FILE (or stdin) holds JSON lines and
//       field F (default "text") is the text.
//   nightshift-predict --model DIR --tokens [inputs as above]
//       one JSON line per input, {"input": NAME, "ids": [...]}: the token ids the model
//       gets (special tokens included, cut to max_len), to compare with one's own tokenizer.
//   nightshift-predict --model DIR --generate N --prompt TEXT [--temperature T] [--top-k K] [--seed S]
//   nightshift-predict --model DIR --score [inputs as above]      perplexity per input (gpt_lm)
//   any of these with --adapter ADAPTER_DIR: a PEFT LoRA adapter on the Hugging Face folder DIR
//
// Exit: 0 done, 1 error (the message on stderr), 2 usage.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/format/text.h"
#include "worker/trainer/host_memory.h"
#include "worker/predict/predict.h"

namespace nt = nightshift::trainer;

namespace {

struct Input {
  std::string name;  // file name, "file:line" or "stdin:line"
  std::string text;  // raw text (Predictor::EncodeText prepares it)
};

std::string ReadAll(std::istream& in, size_t max_bytes) {
  std::string s(max_bytes, '\0');
  in.read(&s[0], static_cast<std::streamsize>(max_bytes));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

// Returns "" or what is wrong.
std::string ReadLines(std::istream& in, const std::string& name, bool jsonl, const std::string& field,
                      std::vector<Input>* out) {
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = name + ":" + std::to_string(n);
    if (!jsonl) {
      out->push_back({where, line});
      continue;
    }
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains(field) || !j[field].is_string())
      return where + ": not a JSON object with a string field '" + field + "' (--text-field)";
    out->push_back({where, j[field].get<std::string>()});
  }
  return "";
}

std::string ReadInputs(const std::vector<std::string>& files, bool jsonl, const std::string& field,
                       size_t max_bytes, std::vector<Input>* out) {
  if (files.empty()) return ReadLines(std::cin, "stdin", jsonl, field, out);
  for (const auto& f : files) {
    if (f == "-") {
      if (std::string err = ReadLines(std::cin, "stdin", jsonl, field, out); !err.empty()) return err;
      continue;
    }
    std::ifstream in(f, std::ios::binary);
    if (!in) return "cannot read " + f;
    if (jsonl) {
      if (std::string err = ReadLines(in, f, true, field, out); !err.empty()) return err;
    } else {
      out->push_back({f, ReadAll(in, max_bytes)});  // like data_prep's ReadFile
    }
  }
  return "";
}

struct Args {
  std::string dir, adapter, output = "text", text_field = "text", prompt, device = "auto";
  std::vector<std::string> files;
  bool jsonl = false, score = false, with_logits = false, no_verify = false, tokens = false, no_kv_cache = false;
  int generate = 0, top_k = 0;
  double temperature = 0.0;  // greedy, as model.generate's default
  int64_t max_tokens = 8192;
  std::optional<uint64_t> seed;
};

// Parses the command line into *a; returns -1 to go on, else the exit code (help: 0).
int ParseArgs(int argc, char** argv, Args* a) {
  CLI::App app{"Run an exported Nightshift model or a Hugging Face folder (BERT, RoBERTa, DistilBERT classifiers; "
               "GPT-2, Llama, Mistral, Qwen2 classifiers or language models): classify texts, score or generate them"};
  app.add_option("--model", a->dir,
                 "the model folder (nightshift job artifacts, or a Hugging Face folder with config.json, "
                 "model.safetensors and tokenizer.json)")
      ->required();
  app.add_option("inputs", a->files, "text files (one text each), or - for stdin (one text per line)");
  app.add_flag("--jsonl", a->jsonl, "inputs are JSON lines; the text is --text-field");
  app.add_option("--text-field", a->text_field, "JSON field holding the text (--jsonl)");
  app.add_option("-o,--output", a->output, "text or json (one JSON object per line)")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_flag("--logits", a->with_logits, "-o json: add the raw logits");
  app.add_flag("--tokens", a->tokens,
               "print each input's token ids instead, one JSON line each: {\"input\": NAME, \"ids\": [...]}");
  app.add_flag("--score", a->score, "language models: print each input's perplexity");
  app.add_option("--generate", a->generate, "language models: continue --prompt by N tokens");
  app.add_option("--prompt", a->prompt, "language models: the text --generate continues");
  app.add_option("--temperature", a->temperature, "--generate: 0 (default) is greedy; above 0 samples");
  app.add_option("--top-k", a->top_k, "--generate: sample among the K likeliest tokens (0: all)");
  app.add_option("--seed", a->seed, "--generate: the sampling seed");
  app.add_flag("--no-kv-cache", a->no_kv_cache,
               "--generate (Hugging Face decoders): recompute the sequence for every token (benchmarks)");
  app.add_option("--max-tokens", a->max_tokens, "padded tokens per batch")->check(CLI::PositiveNumber);
  app.add_option("--device", a->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_flag("--no-verify", a->no_verify, "skip checksums.json");
  app.add_option("--adapter", a->adapter,
                 "a PEFT LoRA adapter folder (a job's export with model.adapter) to run on --model, its base");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return -1;
}

// One line per input: its label and the class probabilities (json: and the logits).
std::string Classify(nt::Predictor& p, const std::vector<Input>& inputs, const std::vector<std::vector<int32_t>>& rows,
                     const Args& a) {
  std::ostringstream out;
  out.precision(6);
  auto logits = p.Logits(rows);
  const auto& labels = p.labels();
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto probs = logits[i].softmax(-1);
    const int64_t best = probs.argmax().item<int64_t>();
    const float* pr = probs.data_ptr<float>();
    if (a.output == "json") {
      nlohmann::json j{{"input", inputs[i].name}, {"label", labels.at(best)}};
      nlohmann::json pj = nlohmann::json::object();
      for (size_t c = 0; c < labels.size(); ++c) pj[labels[c]] = pr[c];
      j["probabilities"] = pj;
      if (a.with_logits) {
        const float* lg = logits[i].data_ptr<float>();
        j["logits"] = std::vector<float>(lg, lg + logits[i].numel());
      }
      out << j.dump() << "\n";
    } else {
      out << inputs[i].name << "\t" << labels.at(best);
      for (size_t c = 0; c < labels.size(); ++c) out << "\t" << labels[c] << "=" << pr[c];
      out << "\n";
    }
  }
  return out.str();
}

std::string Score(nt::Predictor& p, const std::vector<Input>& inputs, const std::vector<std::vector<int32_t>>& rows,
                  const Args& a) {
  std::ostringstream out;
  out.precision(6);
  auto ppl = p.Perplexity(rows);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (a.output == "json")
      out << nlohmann::json{{"input", inputs[i].name}, {"perplexity", ppl[i]}}.dump() << "\n";
    else
      out << inputs[i].name << "\t" << ppl[i] << "\n";
  }
  return out.str();
}

int Run(int argc, char** argv) {
  Args a;
  if (const int code = ParseArgs(argc, argv, &a); code >= 0) return code;
  nt::PredictorOptions options;
  options.device = a.device;
  options.max_tokens = a.max_tokens;
  options.verify = !a.no_verify;
  options.adapter = a.adapter;
  std::unique_ptr<nt::Predictor> p;
  if (std::string err = nt::Predictor::Open(a.dir, options, &p); !err.empty()) {
    std::fprintf(stderr, "nightshift-predict: %s\n", err.c_str());
    return 1;
  }
  const bool lm = p->causal_lm();
  if (!lm && (a.score || a.generate > 0)) {
    std::fprintf(stderr, "nightshift-predict: %s is a classifier: --score and --generate are for language models\n",
                 a.dir.c_str());
    return 2;
  }
  if (lm && !a.score && a.generate <= 0 && !a.tokens) {
    std::fprintf(stderr, "nightshift-predict: %s is a language model: pass --generate N --prompt TEXT or --score\n",
                 a.dir.c_str());
    return 2;
  }
  if (a.generate > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto g = p->Generate(a.prompt, a.generate, a.temperature, a.top_k, a.seed, !a.no_kv_cache);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (a.output == "json")
      std::cout << nlohmann::json{{"prompt", a.prompt}, {"text", g.text}, {"prompt_ids", g.prompt_ids},
                                  {"new_ids", g.new_ids}, {"seconds", seconds}}.dump() << "\n";
    else
      std::cout << (g.text.empty() ? nlohmann::json(g.new_ids).dump() : g.text) << "\n";
    return 0;
  }
  std::vector<Input> inputs;
  if (std::string err = ReadInputs(a.files, a.jsonl, a.text_field, p->max_bytes(), &inputs); !err.empty()) {
    std::fprintf(stderr, "nightshift-predict: %s\n", err.c_str());
    return 1;
  }
  std::vector<std::vector<int32_t>> rows;
  rows.reserve(inputs.size());
  for (const auto& in : inputs) rows.push_back(p->EncodeText(in.text));
  if (a.tokens) {
    for (size_t i = 0; i < inputs.size(); ++i)
      std::cout << nlohmann::json{{"input", inputs[i].name}, {"ids", rows[i]}}.dump() << "\n";
    return 0;
  }
  std::cout << (a.score ? Score(*p, inputs, rows, a) : Classify(*p, inputs, rows, a));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  nightshift::trainer::KeepFreedHostMemory();
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nightshift-predict: error: %s\n", e.what());
    return 1;
  }
}
