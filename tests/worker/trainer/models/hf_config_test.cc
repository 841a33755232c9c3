// config.json of a Hugging Face folder (worker/trainer/models/hf_config.h), without LibTorch:
// transformers' keys and defaults land in HfConfig, and what we cannot build is an error
// naming the file, the key and the value.
#include "worker/trainer/models/hf_config.h"

#include <gtest/gtest.h>

#include <string>

namespace nightshift::trainer {
namespace {

// What transformers 5 writes for a tiny BertForSequenceClassification (tests/support/hf_folders.py).
const char kBert[] = R"({"architectures":["BertForSequenceClassification"],"attention_probs_dropout_prob":0.1,
  "classifier_dropout":null,"hidden_act":"gelu","hidden_dropout_prob":0.1,"hidden_size":8,
  "id2label":{"0":"ham","1":"spam"},"initializer_range":0.02,"intermediate_size":16,"layer_norm_eps":1e-12,
  "max_position_embeddings":512,"model_type":"bert","num_attention_heads":2,"num_hidden_layers":1,
  "pad_token_id":0,"type_vocab_size":2,"vocab_size":120})";

std::string Error(const std::string& text) {
  HfConfig c;
  return ParseHfConfig(text, "dir/config.json", &c);
}

TEST(HfConfigTest, ABertConfigReadsAsTransformersReadsIt) {
  HfConfig c;
  ASSERT_EQ(ParseHfConfig(kBert, "dir/config.json", &c), "");
  EXPECT_EQ(c.model_type, "bert");
  EXPECT_EQ(c.vocab_size, 120);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.num_hidden_layers, 1);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.intermediate_size, 16);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_DOUBLE_EQ(c.classifier_dropout, 0.1);  // null: hidden_dropout_prob
  EXPECT_EQ(c.labels, (std::vector<std::string>{"ham", "spam"}));
}

TEST(HfConfigTest, DistilBertNamesLandInTheBertFields) {
  HfConfig c;
  ASSERT_EQ(ParseHfConfig(R"({"model_type":"distilbert","dim":16,"n_layers":2,"n_heads":4,"hidden_dim":32,
                              "vocab_size":50,"num_labels":3})",
                          "dir/config.json", &c),
            "");
  EXPECT_EQ(c.hidden_size, 16);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.intermediate_size, 32);
  EXPECT_EQ(c.type_vocab_size, 0);
  EXPECT_EQ(c.labels, (std::vector<std::string>{"LABEL_0", "LABEL_1", "LABEL_2"}));
}

// Decoders: GPT-2's own names and defaults (tied head, three dropouts), the Llama family's
// grouped heads, rotary base (transformers 5's rope_parameters or the older rope_theta),
// biases, sliding window and eos list.
TEST(HfConfigTest, DecoderConfigsReadAsTransformersReadsThem) {
  HfConfig g;
  ASSERT_EQ(ParseHfConfig(R"({"model_type":"gpt2","n_embd":64,"n_layer":3,"n_head":4,"resid_pdrop":0.2})", "c", &g), "");
  EXPECT_EQ(g.hidden_size, 64);
  EXPECT_EQ(g.num_hidden_layers, 3);
  EXPECT_EQ(g.intermediate_size, 256);  // n_inner absent: 4 x n_embd
  EXPECT_EQ(g.max_position_embeddings, 1024);
  EXPECT_TRUE(g.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(g.hidden_dropout, 0.2);
  EXPECT_DOUBLE_EQ(g.embedding_dropout, 0.1);
  EXPECT_FALSE(g.pad_token_id.has_value());
  EXPECT_TRUE(g.decoder());
  HfConfig l;
  ASSERT_EQ(ParseHfConfig(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":8,"num_key_value_heads":2,
                              "rope_parameters":{"rope_type":"default","rope_theta":500000.0},"eos_token_id":[7,9],
                              "attention_bias":true})",
                          "c", &l),
            "");
  EXPECT_EQ(l.head_dim, 8);
  EXPECT_EQ(l.num_key_value_heads, 2);
  EXPECT_DOUBLE_EQ(l.rope_theta, 500000.0);
  EXPECT_EQ(l.eos_token_ids, (std::vector<int64_t>{7, 9}));
  EXPECT_TRUE(l.qkv_bias && l.o_bias);
  EXPECT_FALSE(l.tie_word_embeddings);
  HfConfig q;
  ASSERT_EQ(ParseHfConfig(R"({"model_type":"qwen2","hidden_size":64,"num_attention_heads":4,"rope_theta":1000000.0})",
                          "c", &q),
            "");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.o_bias);
  EXPECT_DOUBLE_EQ(q.rope_theta, 1e6);
  EXPECT_FALSE(q.sliding_window.has_value());
  HfConfig m;
  ASSERT_EQ(ParseHfConfig(R"({"model_type":"mistral","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2})",
                          "c", &m),
            "");
  EXPECT_EQ(m.sliding_window, 4096);
}

TEST(HfConfigTest, WhatCannotBeBuiltIsAnErrorNamingTheFileTheKeyAndTheValue) {
  EXPECT_EQ(Error("[1, 2]"), "dir/config.json: not a JSON object");
  EXPECT_EQ(Error(R"({"model_type":"gpt_neo"})"),
            "dir/config.json: model_type \"gpt_neo\" is not supported (bert, roberta, distilbert, gpt2, llama, "
            "mistral, qwen2)");
  EXPECT_EQ(Error(R"({"model_type":"gpt2","activation_function":"relu"})"),
            "dir/config.json: activation_function \"relu\" is not supported: only the tanh GELU (gelu_new, "
            "gelu_pytorch_tanh)");
  EXPECT_EQ(Error(R"({"model_type":"llama","rope_scaling":{"rope_type":"yarn","factor":4}})"),
            "dir/config.json: rope_scaling.rope_type \"yarn\" is not supported (only \"default\": no scaling)");
  EXPECT_EQ(Error(R"({"model_type":"mistral","num_key_value_heads":5})"),
            "dir/config.json: num_attention_heads 32 is not a multiple of num_key_value_heads 5");
  EXPECT_EQ(Error(R"({"model_type":"bert","hidden_act":"relu"})"),
            "dir/config.json: hidden_act \"relu\" is not supported (only \"gelu\")");
  EXPECT_EQ(Error(R"({"model_type":"bert","hidden_size":"big"})"),
            "dir/config.json: hidden_size is \"big\", not a value of the expected type");
  EXPECT_EQ(Error(R"({"model_type":"bert","num_attention_heads":5})"),
            "dir/config.json: hidden size 768 is not a multiple of the 5 attention heads");
}

// A number in config.json must not cost more than the file: num_labels 10^11 (what
// hf_config_fuzz found) made 10^11 label names before anything else was checked, and a
// size past an int wrapped when the trainer took it as model.d_model and the like.
TEST(HfConfigTest, NumbersBeyondWhatAModelCanHaveAreErrors) {
  EXPECT_EQ(Error(R"({"model_type":"bert","num_labels":100000000000})"),
            "dir/config.json: num_labels 100000000000 is more than the 10000 labels a classifier may have");
  HfConfig c;
  EXPECT_EQ(ParseHfConfig(R"({"model_type":"bert","num_labels":10000})", "dir/config.json", &c), "");
  EXPECT_EQ(c.labels.size(), 10000u);
  std::string id2label = R"({"model_type":"bert","id2label":{)";
  for (int i = 0; i <= 10000; ++i) id2label += (i ? ",\"" : "\"") + std::to_string(i) + "\":\"l\"";
  EXPECT_EQ(Error(id2label + "}}"),
            "dir/config.json: id2label has 10001 labels, more than the 10000 a classifier may have");
  EXPECT_EQ(Error(R"({"model_type":"bert","hidden_size":4294967296,"num_attention_heads":1})"),
            "dir/config.json: hidden size 4294967296 is not a size");
  EXPECT_EQ(Error(R"({"model_type":"distilbert","n_layers":2147483648})"),
            "dir/config.json: layers 2147483648 is not a size");
}

// A value nested 200,000 deep overflowed the stack where the message dumped it
// (hf_config_fuzz, run on {"model_type":"bert","hidden_act":[[[...]]]}).
TEST(HfConfigTest, AValueNestedBeyondSerdeJsonsDepthIsAnErrorNotACrash) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_EQ(Error(R"({"model_type":"bert","hidden_act":)" + deep + "}"), "dir/config.json: nests deeper than 128 levels");
}

}  // namespace
}  // namespace nightshift::trainer
