// The pre-tokenizers against the reference: the words below are what `tokenizers`
// 0.23.3 (Python, /opt/nightshift/venv) gave for each hard text with pre_tokenize_str,
// pasted (offsets left out).
#include "tokenizer/components.h"

#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace nightshift::tokenizer {
namespace {

using namespace std::string_literals;  // the texts hold NUL

struct SplitCase {
  std::string input;
  std::vector<std::string> words;
};

// kBert: the reference's pre_tokenize_str of each hard text (the words only).
const SplitCase kBert[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     {"Hello"s, "World"s, "!"s, "\u00C0\u00C9\u00CE\u00D5\u00DC"s, "\u00F1"s, "\u00E7"s, "\u00C5NGSTR\u00D6M"s}},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     {"e\u0301"s, "a\u0308\u0304"s, "o\u0323\u0302"s, "\u1EAD"s, "\u2026"s, "o\u1AC1\u0316"s, "\U00011938"s}},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     {"C\u1EE5"s, "th\u1EC3"s, ","s, "b\u1EA1n"s, "s\u1EBD"s, "tham"s, "gia"s, "m\u1ED9t"s, "nh\u00F3m"s, "\u0111oc"s}},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s}},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     {"\u91CE\u53E3\u91CC\u4F73"s, "Noguchi"s, "Rika"s, "\u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8"s, "\uD55C\uAD6D\uC5B4"s}},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s}},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     {"\U0001F600\U0001F44D\U0001F3FD"s, "\U0001F1FA\U0001F1F8"s, "\U0001F468\u200D\U0001F469\u200D\U0001F467"s, "\U0001F970"s}},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     {"a\000b\uFFFDc\177d"s, "e"s, "f"s, "g"s, "h"s, "i"s, "j"s}},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo"s, "p"s, "q"s, "r\u2060s"s}},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s}},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     {"\u0130stanbul"s, "\u1E9E"s, "\u03A3\u0391\u03A3"s, "\u039F\u0394\u039F\u03A3"s, "\u01C5"s, "\u01C8"s, "\u03A9"s, "K"s, "\u00C5"s, "\u216B"s, "\u24B6"s, "\U00010400"s, "\u0391\u03A3"s, "."s}},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     {"\uA7C0\U00010570\U0001E900"s, "a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s}},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     {"a"s, "b"s, "c"s}},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627"s, "\u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD"s, "\u0928\u092E\u0938\u094D\u0924\u0947"s}},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     {"\uFB01"s, "\u2460"s, "\u338F"s, "\u00BD"s, "\uFF28\uFF45\uFF4C\uFF4C\uFF4F"s, "\u210C"s, "\u337F"s}},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     {"\u0CF3a\u0CCD\U00011F41\u0301"s, "\u1AC1o"s}},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     {"don"s, "'"s, "t"s, "stop"s, "-"s, "believing"s, "("s, "yes"s, ")"s, "["s, "no"s, "]"s, "{"s, "maybe"s, "}"s, "<"s, "tag"s, ">"s, "a"s, "."s, "b"s, "."s, "c"s, "@"s, "user"s, "#"s, "hash"s, "$"s, "5"s, "^"s, "_"s, "^"s, "`"s, "q"s, "`"s, "~"s, "|"s}},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     {"\u00BF"s, "Qu\u00E9"s, "?"s, "\u00A1"s, "S\u00ED"s, "!"s, "\u00AB"s, "quote"s, "\u00BB"s, "\u201C"s, "smart"s, "\u201D"s, "\u2014"s, "\u2013"s, "\u2026"s, "\u00B7"s, "\u30FB"s, "\u3001"s, "\u3002"s, "\u300C"s, "\u62EC\u5F27"s, "\u300D"s, "\u00A1"s, "\u00A7"s, "\u00B6"s, "\u2030"s, "\u203B"s}},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     {"\u166D"s, "\U000111C9"s, "\u2E42"s, "\u2E52\U0001144B"s}},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s}},
};

// kWhitespace: the reference's pre_tokenize_str of each hard text (the words only).
const SplitCase kWhitespace[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     {"Hello"s, "World"s, "!"s, "\u00C0\u00C9\u00CE\u00D5\u00DC"s, "\u00F1"s, "\u00E7"s, "\u00C5NGSTR\u00D6M"s}},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     {"e\u0301"s, "a\u0308\u0304"s, "o\u0323\u0302"s, "\u1EAD"s, "\u2026"s, "o\u1AC1\u0316"s, "\U00011938"s}},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     {"C\u1EE5"s, "th\u1EC3"s, ","s, "b\u1EA1n"s, "s\u1EBD"s, "tham"s, "gia"s, "m\u1ED9t"s, "nh\u00F3m"s, "\u0111oc"s}},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s}},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     {"\u91CE\u53E3\u91CC\u4F73"s, "Noguchi"s, "Rika"s, "\u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8"s, "\uD55C\uAD6D\uC5B4"s}},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007"s, "\u2F00"s, "\U0002F800"s}},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     {"\U0001F600\U0001F44D\U0001F3FD"s, "\U0001F1FA\U0001F1F8"s, "\U0001F468"s, "\u200D"s, "\U0001F469"s, "\u200D"s, "\U0001F467"s, "\U0001F970"s}},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     {"a"s, "\000"s, "b"s, "\uFFFD"s, "c"s, "\177"s, "d"s, "e"s, "f"s, "g"s, "h"s, "i"s, "j"s}},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     {"\u200B"s, "k\u200Cl\u200Dm"s, "\uFEFF"s, "n"s, "\u00AD"s, "o"s, "p"s, "q"s, "r"s, "\u2060"s, "s"s}},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     {"\uE000"s, "x"s, "\U000F0000"s, "y"s, "\u0890"s, "z"s, "\U000110CD"s, "w"s, "\u061C"s, "v"s, "\u08E2"s, "u"s}},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     {"\u0130stanbul"s, "\u1E9E"s, "\u03A3\u0391\u03A3"s, "\u039F\u0394\u039F\u03A3"s, "\u01C5"s, "\u01C8"s, "\u03A9"s, "K"s, "\u00C5"s, "\u216B"s, "\u24B6"s, "\U00010400"s, "\u0391\u03A3"s, "."s}},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     {"\uA7C0\U00010570\U0001E900"s, "a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s}},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     {"a"s, "b"s, "c"s}},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627"s, "\u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD"s, "\u0928\u092E\u0938\u094D\u0924\u0947"s}},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     {"\uFB01"s, "\u2460"s, "\u338F"s, "\u00BD"s, "\uFF28\uFF45\uFF4C\uFF4C\uFF4F"s, "\u210C"s, "\u337F"s}},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     {"\u0CF3a\u0CCD\U00011F41\u0301"s, "\u1AC1o"s}},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     {"don"s, "'"s, "t"s, "stop"s, "-"s, "believing"s, "("s, "yes"s, ")"s, "["s, "no"s, "]"s, "{"s, "maybe"s, "}"s, "<"s, "tag"s, ">"s, "a"s, "."s, "b"s, "."s, "c"s, "@"s, "user"s, "#"s, "hash"s, "$"s, "5"s, "^"s, "_"s, "^"s, "`"s, "q"s, "`"s, "~"s, "|"s}},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     {"\u00BF"s, "Qu\u00E9"s, "?"s, "\u00A1"s, "S\u00ED"s, "!"s, "\u00AB"s, "quote"s, "\u00BB"s, "\u201C"s, "smart"s, "\u201D"s, "\u2014"s, "\u2013"s, "\u2026"s, "\u00B7"s, "\u30FB"s, "\u3001\u3002"s, "\u300C"s, "\u62EC\u5F27"s, "\u300D"s, "\u00A1"s, "\u00A7"s, "\u00B6"s, "\u2030"s, "\u203B"s}},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     {"\u166D"s, "\U000111C9"s, "\u2E42\u2E52\U0001144B"s}},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s}},
};

// kWhitespaceSplit: the reference's pre_tokenize_str of each hard text (the words only).
const SplitCase kWhitespaceSplit[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     {"Hello"s, "World!"s, "\u00C0\u00C9\u00CE\u00D5\u00DC"s, "\u00F1"s, "\u00E7"s, "\u00C5NGSTR\u00D6M"s}},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     {"e\u0301"s, "a\u0308\u0304"s, "o\u0323\u0302"s, "\u1EAD\u2026"s, "o\u1AC1\u0316"s, "\U00011938"s}},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     {"C\u1EE5"s, "th\u1EC3,"s, "b\u1EA1n"s, "s\u1EBD"s, "tham"s, "gia"s, "m\u1ED9t"s, "nh\u00F3m"s, "\u0111oc"s}},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s}},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     {"\u91CE\u53E3\u91CC\u4F73"s, "Noguchi"s, "Rika"s, "\u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8"s, "\uD55C\uAD6D\uC5B4"s}},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s}},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     {"\U0001F600\U0001F44D\U0001F3FD"s, "\U0001F1FA\U0001F1F8"s, "\U0001F468\u200D\U0001F469\u200D\U0001F467"s, "\U0001F970"s}},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     {"a\000b\uFFFDc\177d"s, "e"s, "f"s, "g"s, "h"s, "i"s, "j"s}},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo"s, "p"s, "q"s, "r\u2060s"s}},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s}},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     {"\u0130stanbul"s, "\u1E9E"s, "\u03A3\u0391\u03A3"s, "\u039F\u0394\u039F\u03A3"s, "\u01C5"s, "\u01C8"s, "\u03A9"s, "K"s, "\u00C5"s, "\u216B"s, "\u24B6"s, "\U00010400"s, "\u0391\u03A3."s}},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     {"\uA7C0\U00010570\U0001E900"s, "a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s}},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     {"a"s, "b"s, "c"s}},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627"s, "\u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD"s, "\u0928\u092E\u0938\u094D\u0924\u0947"s}},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     {"\uFB01"s, "\u2460"s, "\u338F"s, "\u00BD"s, "\uFF28\uFF45\uFF4C\uFF4C\uFF4F"s, "\u210C"s, "\u337F"s}},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     {"\u0CF3a\u0CCD\U00011F41\u0301"s, "\u1AC1o"s}},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     {"don't"s, "stop-believing"s, "(yes)"s, "[no]"s, "{maybe}"s, "<tag>"s, "a.b.c"s, "@user"s, "#hash"s, "$5"s, "^_^"s, "`q`"s, "~"s, "|"s}},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     {"\u00BFQu\u00E9?"s, "\u00A1S\u00ED!"s, "\u00ABquote\u00BB"s, "\u201Csmart\u201D"s, "\u2014"s, "\u2013"s, "\u2026"s, "\u00B7"s, "\u30FB"s, "\u3001\u3002"s, "\u300C\u62EC\u5F27\u300D"s, "\u00A1"s, "\u00A7"s, "\u00B6"s, "\u2030"s, "\u203B"s}},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s}},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s}},
};

std::vector<std::string> Split(const PreTokenizer& pre_tokenizer, const std::string& text) {
  std::vector<std::u32string> words = {U"before"};  // Split appends: what is there stays
  pre_tokenizer.Split(DecodeUtf8(text), &words);
  EXPECT_EQ(words.front(), U"before");
  std::vector<std::string> out;
  for (size_t i = 1; i < words.size(); ++i) out.push_back(EncodeUtf8(words[i]));
  return out;
}

template <size_t N>
void ExpectCases(const char* type, const SplitCase (&cases)[N]) {
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  ASSERT_EQ(NewBertPreTokenizer(Json{{"type", type}}, &pre_tokenizer), "");
  for (const SplitCase& c : cases) EXPECT_EQ(Split(*pre_tokenizer, c.input), c.words) << c.input;
}

TEST(BertPreTokenizerTest, BertPreTokenizerMatchesTheReference) {
  ExpectCases("BertPreTokenizer", kBert);
}

TEST(BertPreTokenizerTest, WhitespaceMatchesTheReference) {
  ExpectCases("Whitespace", kWhitespace);
}

TEST(BertPreTokenizerTest, WhitespaceSplitMatchesTheReference) {
  ExpectCases("WhitespaceSplit", kWhitespaceSplit);
}

TEST(BertPreTokenizerTest, NoWordsFromEmptyOrBlankText) {
  for (const char* type : {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}) {
    std::unique_ptr<PreTokenizer> pre_tokenizer;
    ASSERT_EQ(NewBertPreTokenizer(Json{{"type", type}}, &pre_tokenizer), "");
    EXPECT_EQ(Split(*pre_tokenizer, ""), std::vector<std::string>{}) << type;
    EXPECT_EQ(Split(*pre_tokenizer, " \t\n\u3000 "), std::vector<std::string>{}) << type;
  }
}

TEST(BertPreTokenizerTest, RefusesOtherTypes) {
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  EXPECT_NE(NewBertPreTokenizer(Json{{"type", "Metaspace"}}, &pre_tokenizer)
                .find("\"Metaspace\" is not implemented"),
            std::string::npos);
  EXPECT_NE(NewBertPreTokenizer(Json::object(), &pre_tokenizer).find("\"type\""),
            std::string::npos);
  EXPECT_EQ(pre_tokenizer, nullptr);
}

}  // namespace
}  // namespace nightshift::tokenizer
