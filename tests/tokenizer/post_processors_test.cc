// The post-processors as transformers writes them in tokenizer.json (BERT: Template;
// RoBERTa: RobertaProcessing; GPT-2: ByteLevel), for one sequence.
#include <gtest/gtest.h>

#include "tokenizer/components.h"

namespace nightshift::tokenizer {
namespace {

std::vector<int32_t> Apply(const char* config, std::vector<int32_t> ids, size_t* added = nullptr) {
  std::unique_ptr<PostProcessor> p;
  EXPECT_EQ(NewPostProcessor(Json::parse(config), &p), "") << config;
  if (p == nullptr) return {};
  if (added != nullptr) *added = p->AddedCount();
  return p->Process(ids);
}

TEST(PostProcessorsTest, SpecialTokensGoAroundTheSequence) {
  size_t added = 0;
  EXPECT_EQ(Apply(R"({"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]})", {7, 8}, &added),
            (std::vector<int32_t>{101, 7, 8, 102}));
  EXPECT_EQ(added, 2u);
  EXPECT_EQ(Apply(R"({"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": true,
                   "add_prefix_space": false})", {}),
            (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(Apply(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"SpecialToken": {"id": "<eos>", "type_id": 0}}],
      "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [101], "tokens": ["[CLS]"]},
                                     "[SEP]": {"id": "[SEP]", "ids": [102], "tokens": ["[SEP]"]},
                                     "<eos>": {"id": "<eos>", "ids": [5, 6], "tokens": ["<", "eos>"]}}})", {9}, &added),
            (std::vector<int32_t>{101, 9, 102, 5, 6}));
  EXPECT_EQ(added, 4u);
  EXPECT_EQ(Apply(R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true})", {4}),
            (std::vector<int32_t>{4}));
  // A Sequence applies each in turn: the later one's tokens outermost.
  EXPECT_EQ(Apply(R"({"type": "Sequence", "processors": [
                   {"type": "ByteLevel"}, {"type": "BertProcessing", "sep": ["b", 2], "cls": ["a", 1]},
                   {"type": "BertProcessing", "sep": ["d", 4], "cls": ["c", 3]}]})", {9}, &added),
            (std::vector<int32_t>{3, 1, 9, 2, 4}));
  EXPECT_EQ(added, 4u);
}

TEST(PostProcessorsTest, WhatIsNotImplementedIsNamed) {
  std::unique_ptr<PostProcessor> p;
  EXPECT_EQ(NewPostProcessor(Json::parse(R"({"type": "Unknown"})"), &p), "post_processor.type: 'Unknown' is not implemented");
  EXPECT_EQ(NewPostProcessor(Json::parse(R"({"type": "BertProcessing", "cls": ["[CLS]", 101]})"), &p),
            "post_processor.sep: expected [token, id]");
  EXPECT_EQ(NewPostProcessor(Json::parse(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "X"}},
                                             {"Sequence": {"id": "A"}}], "special_tokens": {}})"), &p),
            R"(post_processor.single: '{"SpecialToken":{"id":"X"}}' names no entry of special_tokens)");
}

// Values of the wrong type ({"Sequence": "A"} threw from Json::value and ended the
// process) and ids that are negative or past an int32 (they would reach the shards as
// token ids) are errors naming what is wrong.
TEST(PostProcessorsTest, ValuesOfTheWrongTypeAreErrorsNotExceptions) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "TemplateProcessing", "single": [{"Sequence": "A"}], "special_tokens": {}})",
       "post_processor.single: only one sequence, A, is implemented"},
      {R"({"type": "TemplateProcessing", "single": [{"SpecialToken": 7}, {"Sequence": {"id": "A"}}]})",
       "post_processor.single: '{\"SpecialToken\":7}' names no entry"},
      {R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "X"}}, {"Sequence": {"id": "A"}}],
           "special_tokens": {"X": {"ids": ["2"]}}})",
       "post_processor.special_tokens: 'X' has the id \"2\", not one from 0 to 2^31-1"},
      {R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "X"}}, {"Sequence": {"id": "A"}}],
           "special_tokens": {"X": {"ids": [-3]}}})",
       "post_processor.special_tokens: 'X' has the id -3"},
      {R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "X"}}, {"Sequence": {"id": "A"}}],
           "special_tokens": {"X": 5}})",
       "names no entry of special_tokens"},
      {R"({"type": "TemplateProcessing", "single": [3]})", "post_processor.single: '3' names no entry"},
      {R"({"type": 5})", "post_processor.type: '' is not implemented"},
      {R"({"type": "Sequence", "processors": [1]})", "post_processor: not an object: 1"},
      {R"({"type": "BertProcessing", "cls": ["[CLS]", -101], "sep": ["[SEP]", 102]})",
       "post_processor.cls: expected [token, id]"},
      {R"({"type": "BertProcessing", "cls": ["[CLS]", 4294967397], "sep": ["[SEP]", 102]})",
       "post_processor.cls: expected [token, id]"},
  };
  for (const auto& [text, want] : cases) {
    std::unique_ptr<PostProcessor> p;
    Error e;
    ASSERT_NO_THROW(e = NewPostProcessor(Json::parse(text), &p)) << text;
    EXPECT_NE(e.find(want), std::string::npos) << text << " -> " << e;
  }
}

}  // namespace
}  // namespace nightshift::tokenizer
