// The normalizers against the reference: every expected string below is what
// `tokenizers` 0.23.3 (Python, /opt/nightshift/venv) gave for the input, pasted with
// tests/tokenizer's hard texts: accents and combining marks, CJK, emoji, control and
// zero-width characters, special case mappings, characters newer than the reference's
// Unicode tables (they must read as unassigned), runs of whitespace.
#include "tokenizer/components.h"

#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace nightshift::tokenizer {
namespace {

using namespace std::string_literals;  // the texts hold NUL

struct Case {
  std::string input;
  std::string expected;
};

// kBertUncased: the reference's normalize_str of each hard text.
const Case kBertUncased[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "hello world! aeiou n c angstrom"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "e a o a\u2026 o\u1AC1 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "cu the, ban se tham gia mot nhom \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E33\u0E19\u0E333\u0E25\u0E33"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     " \u91CE  \u53E3  \u91CC  \u4F73  noguchi rika  \u65E5  \u672C  \u8A9E \u30C6\u30AD\u30B9\u30C8 \u1112\u1161\u11AB\u1100\u116E\u11A8\u110B\u1165"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     " \U00020000 x \U0002A6DF \U0002B820y \U0002B920  \u8C48 \u3007\u2F00 \u4E3D "s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\U0001F469\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "abcd e f ghij"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "klmno p q rs"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "xy\u0890z\U000110CDwv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "istanbul \u00DF \u03C3\u03B1\u03C3 \u03BF\u03B4\u03BF\u03C3 \u01C6 \u01C9 \u03C9 k a \u217B \u24D0 \U00010428 \u03B1\u03C3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C1\U00010597\U0001E922 ab\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a       b    c  "s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u0631\u062D\u0628\u0627 \u05E9\u05DC\u05D5\u05DD \u0928\u092E\u0938\u0924"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "\uFB01 \u2460 \u338F \u00BD \uFF48\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\U00011F41 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFque? \u00A1si! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C \u62EC  \u5F27 \u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxeeeee"s},
};

// kBertCased: the reference's normalize_str of each hard text.
const Case kBertCased[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     " \u91CE  \u53E3  \u91CC  \u4F73  Noguchi Rika  \u65E5  \u672C  \u8A9E \u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     " \U00020000 x \U0002A6DF \U0002B820y \U0002B920  \uF900 \u3007\u2F00 \U0002F800 "s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\U0001F469\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "abcd e f ghij"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "klmno p q rs"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "xy\u0890z\U000110CDwv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a       b    c  "s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C \u62EC  \u5F27 \u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s},
};

// kBertLowercaseKeepAccents: the reference's normalize_str of each hard text.
const Case kBertLowercaseKeepAccents[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "hello world! \u00E0\u00E9\u00EE\u00F5\u00FC \u00F1 \u00E7 \u00E5ngstr\u00F6m"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "c\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     " \u91CE  \u53E3  \u91CC  \u4F73  noguchi rika  \u65E5  \u672C  \u8A9E \u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     " \U00020000 x \U0002A6DF \U0002B820y \U0002B920  \uF900 \u3007\u2F00 \U0002F800 "s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\U0001F469\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "abcd e f ghij"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "klmno p q rs"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "xy\u0890z\U000110CDwv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "i\u0307stanbul \u00DF \u03C3\u03B1\u03C3 \u03BF\u03B4\u03BF\u03C3 \u01C6 \u01C9 \u03C9 k \u00E5 \u217B \u24D0 \U00010428 \u03B1\u03C3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C1\U00010597\U0001E922 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a       b    c  "s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "\uFB01 \u2460 \u338F \u00BD \uFF48\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFqu\u00E9? \u00A1s\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C \u62EC  \u5F27 \u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s},
};

// kBertStripOnly: the reference's normalize_str of each hard text.
const Case kBertStripOnly[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "Hello World! AEIOU n c ANGSTROM"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "e a o a\u2026 o\u1AC1 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "Cu the, ban se tham gia mot nhom \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E33\u0E19\u0E333\u0E25\u0E33"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     "\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \u1112\u1161\u11AB\u1100\u116E\u11A8\u110B\u1165"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     "\U00020000x\U0002A6DF\U0002B820y\U0002B920\u8C48\u3007\u2F00\u4E3D"s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "Istanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K A \u216B \u24B6 \U00010400 \u0391\u03A3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C0\U00010570\U0001E900 ab\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a  \012\012\011  b \u3000\u3000 c\015\012"s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u0631\u062D\u0628\u0627 \u05E9\u05DC\u05D5\u05DD \u0928\u092E\u0938\u0924"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\U00011F41 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFQue? \u00A1Si! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxeeeee"s},
};

// kLowercase: the reference's normalize_str of each hard text.
const Case kLowercase[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "hello world! \u00E0\u00E9\u00EE\u00F5\u00FC \u00F1 \u00E7 \u00E5ngstr\u00F6m"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "c\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     "\u91CE\u53E3\u91CC\u4F73 noguchi rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     "\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "i\u0307stanbul \u00DF \u03C3\u03B1\u03C3 \u03BF\u03B4\u03BF\u03C3 \u01C6 \u01C9 \u03C9 k \u00E5 \u217B \u24D0 \U00010428 \u03B1\u03C3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C1\U00010597\U0001E922 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a  \012\012\011  b \u3000\u3000 c\015\012"s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "\uFB01 \u2460 \u338F \u00BD \uFF48\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFqu\u00E9? \u00A1s\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s},
};

// kNfd: the reference's normalize_str of each hard text.
const Case kNfd[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "Hello World! A\u0300E\u0301I\u0302O\u0303U\u0308 n\u0303 c\u0327 A\u030ANGSTRO\u0308M"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "e\u0301 a\u0308\u0304 o\u0323\u0302 a\u0323\u0302\u2026 o\u1AC1\u0316 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "Cu\u0323 the\u0302\u0309, ba\u0323n se\u0303 tham gia mo\u0323\u0302t nho\u0301m \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     "\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \u1112\u1161\u11AB\u1100\u116E\u11A8\u110B\u1165"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     "\U00020000x\U0002A6DF\U0002B820y\U0002B920\u8C48\u3007\u2F00\u4E3D"s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "I\u0307stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K A\u030A \u216B \u24B6 \U00010400 \u0391\u03A3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a  \012\012\011  b \u3000\u3000 c\015\012"s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFQue\u0301? \u00A1Si\u0301! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxe\u0301e\u0301e\u0301e\u0301e\u0301"s},
};

// kNfc: the reference's normalize_str of each hard text.
const Case kNfc[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "\u00E9 \u01DF \u1ED9 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     "\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     "\U00020000x\U0002A6DF\U0002B820y\U0002B920\u8C48\u3007\u2F00\u4E3D"s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a  \012\012\011  b \u3000\u3000 c\015\012"s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s},
};

// kNfkd: the reference's normalize_str of each hard text.
const Case kNfkd[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "Hello World! A\u0300E\u0301I\u0302O\u0303U\u0308 n\u0303 c\u0327 A\u030ANGSTRO\u0308M"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "e\u0301 a\u0308\u0304 o\u0323\u0302 a\u0323\u0302... o\u1AC1\u0316 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "Cu\u0323 the\u0302\u0309, ba\u0323n se\u0303 tham gia mo\u0323\u0302t nho\u0301m \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E4D\u0E32\u0E19\u0E49\u0E4D\u0E323\u0E25\u0E4D\u0E32"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     "\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \u1112\u1161\u11AB\u1100\u116E\u11A8\u110B\u1165"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     "\U00020000x\U0002A6DF\U0002B820y\U0002B920\u8C48\u3007\u4E00\u4E3D"s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p q r\u2060s"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "I\u0307stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 Dz\u030C Lj \u03A9 K A\u030A XII A \U00010400 \u0391\u03A3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a  \012\012\011  b    c\015\012"s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "fi 1 kg 1\u20442 Hello H \u682A\u5F0F\u4F1A\u793E"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFQue\u0301? \u00A1Si\u0301! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 ... \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxe\u0301e\u0301e\u0301e\u0301e\u0301"s},
};

// kNfkc: the reference's normalize_str of each hard text.
const Case kNfkc[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "\u00E9 \u01DF \u1ED9 \u1EAD... o\u1AC1\u0316 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E4D\u0E32\u0E19\u0E49\u0E4D\u0E323\u0E25\u0E4D\u0E32"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     "\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     "\U00020000x\U0002A6DF\U0002B820y\U0002B920\u8C48\u3007\u4E00\u4E3D"s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p q r\u2060s"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 D\u017E Lj \u03A9 K \u00C5 XII A \U00010400 \u0391\u03A3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a  \012\012\011  b    c\015\012"s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "fi 1 kg 1\u20442 Hello H \u682A\u5F0F\u4F1A\u793E"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 ... \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s},
};

// kStripAccents: the reference's normalize_str of each hard text.
const Case kStripAccents[] = {
    {"Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s,
     "Hello World! \u00C0\u00C9\u00CE\u00D5\u00DC \u00F1 \u00E7 \u00C5NGSTR\u00D6M"s},
    {"e\u0301 a\u0308\u0304 o\u0323\u0302 \u1EAD\u2026 o\u1AC1\u0316 \U00011938"s,
     "e a o \u1EAD\u2026 o\u1AC1 \U00011938"s},
    {"C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s,
     "C\u1EE5 th\u1EC3, b\u1EA1n s\u1EBD tham gia m\u1ED9t nh\u00F3m \u0111oc"s},
    {"\u0E33\u0E19\u0E49\u0E333\u0E25\u0E33"s,
     "\u0E33\u0E19\u0E333\u0E25\u0E33"s},
    {"\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s,
     "\u91CE\u53E3\u91CC\u4F73 Noguchi Rika \u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \uD55C\uAD6D\uC5B4"s},
    {"\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s,
     "\U00020000x\U0002A6DF\U0002B820y\U0002B920\uF900\u3007\u2F00\U0002F800"s},
    {"\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s,
     "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970"s},
    {"a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s,
     "a\000b\uFFFDc\177d\011e\012f\015g\013h\014i\302\205j"s},
    {"\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s,
     "\u200Bk\u200Cl\u200Dm\uFEFFn\u00ADo\u2028p\u3000q\u00A0r\u2060s"s},
    {"\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s,
     "\uE000x\U000F0000y\u0890z\U000110CDw\u061Cv\u08E2u"s},
    {"\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s,
     "\u0130stanbul \u1E9E \u03A3\u0391\u03A3 \u039F\u0394\u039F\u03A3 \u01C5 \u01C8 \u03A9 K \u00C5 \u216B \u24B6 \U00010400 \u0391\u03A3."s},
    {"\uA7C0\U00010570\U0001E900 a\u1734b\u1885c\u1886d\uA9BDe\u1CF2f\u1CF3"s,
     "\uA7C0\U00010570\U0001E900 abcdef"s},
    {"a  \012\012\011  b \u3000\u3000 c\015\012"s,
     "a  \012\012\011  b \u3000\u3000 c\015\012"s},
    {"\u0645\u064E\u0631\u0652\u062D\u064E\u0628\u064B\u0627 \u05E9\u05B8\u05C1\u05DC\u05D5\u05B9\u05DD \u0928\u092E\u0938\u094D\u0924\u0947"s,
     "\u0645\u0631\u062D\u0628\u0627 \u05E9\u05DC\u05D5\u05DD \u0928\u092E\u0938\u0924"s},
    {"\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s,
     "\uFB01 \u2460 \u338F \u00BD \uFF28\uFF45\uFF4C\uFF4C\uFF4F \u210C \u337F"s},
    {"\u0CF3a\u0CCD\U00011F41\u0301 \u1AC1o"s,
     "\u0CF3a\U00011F41 \u1AC1o"s},
    {"don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s,
     "don't stop-believing (yes) [no] {maybe} <tag> a.b.c @user #hash $5 ^_^ `q` ~ |"s},
    {"\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s,
     "\u00BFQu\u00E9? \u00A1S\u00ED! \u00ABquote\u00BB \u201Csmart\u201D \u2014 \u2013 \u2026 \u00B7 \u30FB \u3001\u3002 \u300C\u62EC\u5F27\u300D \u00A1 \u00A7 \u00B6 \u2030 \u203B"s},
    {"\u166D\U000111C9\u2E42\u2E52\U0001144B"s,
     "\u166D\U000111C9\u2E42\u2E52\U0001144B"s},
    {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s,
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00E9\u00E9\u00E9\u00E9\u00E9"s},
};

std::unique_ptr<Normalizer> Make(const std::string& json) {
  std::unique_ptr<Normalizer> normalizer;
  const Error error = NewNormalizer(Json::parse(json), &normalizer);
  EXPECT_EQ(error, "") << json;
  return normalizer;
}

std::string Apply(const Normalizer& normalizer, const std::string& text) {
  std::u32string codes = DecodeUtf8(text);
  normalizer.Normalize(&codes);
  return EncodeUtf8(codes);
}

template <size_t N>
void ExpectCases(const std::string& json, const Case (&cases)[N]) {
  const auto normalizer = Make(json);
  ASSERT_NE(normalizer, nullptr);
  for (const Case& c : cases) EXPECT_EQ(Apply(*normalizer, c.input), c.expected) << c.input;
}

constexpr char kBert[] = R"({"type": "BertNormalizer", "clean_text": true,
                             "handle_chinese_chars": true, "strip_accents": %s,
                             "lowercase": %s})";

std::string BertJson(const char* strip_accents, const char* lowercase) {
  char json[512];
  std::snprintf(json, sizeof json, kBert, strip_accents, lowercase);
  return json;
}

TEST(NormalizersTest, BertUncasedMatchesTheReference) {
  ExpectCases(BertJson("null", "true"), kBertUncased);  // null strips accents: lowercase
}

TEST(NormalizersTest, BertCasedMatchesTheReference) {
  ExpectCases(BertJson("null", "false"), kBertCased);  // null keeps accents: no lowercase
}

TEST(NormalizersTest, BertLowercaseKeepingAccentsMatchesTheReference) {
  ExpectCases(BertJson("false", "true"), kBertLowercaseKeepAccents);
}

TEST(NormalizersTest, BertStripAccentsAloneMatchesTheReference) {
  ExpectCases(R"({"type": "BertNormalizer", "clean_text": false, "handle_chinese_chars": false,
                  "strip_accents": true, "lowercase": false})",
              kBertStripOnly);
}

TEST(NormalizersTest, LowercaseMatchesTheReference) {
  ExpectCases(R"({"type": "Lowercase"})", kLowercase);
}

TEST(NormalizersTest, UnicodeFormsMatchTheReference) {
  ExpectCases(R"({"type": "NFD"})", kNfd);
  ExpectCases(R"({"type": "NFC"})", kNfc);
  ExpectCases(R"({"type": "NFKD"})", kNfkd);
  ExpectCases(R"({"type": "NFKC"})", kNfkc);
}

TEST(NormalizersTest, StripAccentsMatchesTheReference) {
  ExpectCases(R"({"type": "StripAccents"})", kStripAccents);
}

TEST(NormalizersTest, RefusesWhatTheReferenceRefuses) {
  const std::pair<const char*, const char*> cases[] = {
      // The reference needs all four keys of BertNormalizer.
      {R"({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
           "strip_accents": null})",
       "\"lowercase\""},
      {R"({"type": "BertNormalizer", "clean_text": 1, "handle_chinese_chars": true,
           "strip_accents": null, "lowercase": true})",
       "\"clean_text\" must be true or false, not 1"},
      {R"({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
           "strip_accents": "yes", "lowercase": true})",
       "\"strip_accents\" must be true or false or null, not \"yes\""},
      {R"({"type": "Nmt"})", "\"Nmt\" is not implemented"},
      {R"({"type": "Sequence", "normalizers": []})", "\"Sequence\""},  // tokenizer.cc's
      {R"({"lowercase": true})", "\"type\""},
  };
  for (const auto& [json, message] : cases) {
    std::unique_ptr<Normalizer> normalizer;
    const Error error = NewNormalizer(Json::parse(json), &normalizer);
    EXPECT_NE(error.find(message), std::string::npos) << json << "\n" << error;
    EXPECT_EQ(normalizer, nullptr);
  }
}

}  // namespace
}  // namespace nightshift::tokenizer
