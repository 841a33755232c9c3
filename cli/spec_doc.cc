// nightshift-spec-doc: the job spec's reference (docs/spec.md), generated from the two
// places that define a field: spec.proto's comment (what the field means) and its row in
// common/spec_rules/spec_rules.h (type, default, range, choices). Nothing is written twice:
// a comment says what the rules cannot, the rules give every number.
//
//   nightshift-spec-doc SPEC_DESCRIPTOR_SET            the whole reference, Markdown
//   nightshift-spec-doc SPEC_DESCRIPTOR_SET FIELD      one field (e.g. model.layers)
//
// SPEC_DESCRIPTOR_SET is what `protoc --include_source_info --descriptor_set_out` makes of
// spec.proto (the build writes it as build/spec.desc). Exit 1 when a field of the JobSpec
// has no comment or no row (the reference would be incomplete), 2 on bad arguments.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/spec_rules/spec_rules.h"

namespace {

namespace pb = google::protobuf;
using nightshift::spec_rules::Absent;
using nightshift::spec_rules::FieldType;
using nightshift::spec_rules::SpecField;

// A comment's lines, each stripped of the one space protoc keeps after "//", joined with
// spaces into one paragraph per blank-line-separated block.
std::string Paragraphs(const std::string& comment) {
  std::istringstream in(comment);
  std::string line, out, block;
  auto flush = [&] {
    if (block.empty()) return;
    if (!out.empty()) out += "\n\n";
    out += block;
    block.clear();
  };
  while (std::getline(in, line)) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos) {
      flush();
      continue;
    }
    if (!block.empty()) block += ' ';
    block += line.substr(start);
  }
  flush();
  return out;
}

std::string Comment(const pb::FieldDescriptor* f) {
  pb::SourceLocation loc;
  if (!f->GetSourceLocation(&loc)) return "";
  std::string text = loc.leading_comments;
  if (!loc.trailing_comments.empty()) text += (text.empty() ? "" : "\n") + loc.trailing_comments;
  return Paragraphs(text);
}

std::string Number(double v) {
  if (v == 1099511627776.0) return "2^40";
  std::ostringstream s;
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    s << static_cast<long long>(v);
  } else {
    s.precision(10);
    s << v;
  }
  return s.str();
}

// `optional` scalars (proto3's synthetic oneofs) say so: absent and 0 differ for them.
std::string ProtoType(const pb::FieldDescriptor* f) {
  const bool optional = f->containing_oneof() != nullptr && f->containing_oneof()->is_synthetic();
  return (optional ? "optional " : "") + std::string(f->type_name());
}

// "default `2` (0 means the default too) · 1 to 128"
std::string Rules(const SpecField& r) {
  std::string out;
  if (r.type == FieldType::kString) {
    // An empty default with choices: another field decides it (the comment says how), or
    // the field is required.
    if (*r.text_default) out = std::string("default `") + r.text_default + "`";
    else out = *r.choices ? "no fixed default" : "default empty";
    const std::string choices = r.choices;
    if (!choices.empty()) {
      std::string list;
      size_t start = 0;
      while (true) {
        const size_t bar = choices.find('|', start);
        list += (list.empty() ? "`" : ", `") + choices.substr(start, bar - start) + "`";
        if (bar == std::string::npos) break;
        start = bar + 1;
      }
      out += " · one of " + list;
    } else {
      out += " · at most " + Number(r.max) + " bytes";
    }
    return out;
  }
  if (r.type == FieldType::kBool) return "default `false`";
  switch (r.absent) {
    case Absent::kZero: out = "default `0`"; break;
    case Absent::kFallback:
      // A fallback of 0: the default is computed from other fields (the comment says how).
      out = r.fallback == 0 ? std::string("computed when 0 or absent")
                            : "default `" + Number(r.fallback) + "` (0 means the default too)";
      break;
    case Absent::kDefault: out = "default `" + Number(r.fallback) + "` when absent (an explicit 0 is kept)"; break;
  }
  if (r.type == FieldType::kUint && r.min == 0 && r.max == 0) return out + " · any unsigned 64-bit value";
  out += " · from " + Number(r.min) + (r.max_exclusive ? " up to (not including) " : " to ") + Number(r.max);
  if (*r.note) out += r.note;
  return out;
}

struct Doc {
  std::string only;  // a field path: print that one field alone
  std::ostringstream out;
  std::vector<std::string> missing;
  bool found = false;
};

void Walk(const pb::Descriptor* message, const std::string& prefix, int depth, Doc* doc) {
  for (int i = 0; i < message->field_count(); ++i) {
    const pb::FieldDescriptor* f = message->field(i);
    const std::string path = prefix + f->name();
    const std::string comment = Comment(f);
    if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
      if (doc->only.empty()) {
        doc->out << "\n" << std::string(depth, '#') << " `" << path << "`\n\n";
        if (!comment.empty()) doc->out << comment << "\n";
      }
      Walk(f->message_type(), path + ".", depth + 1, doc);
      continue;
    }
    const SpecField* row = nightshift::spec_rules::FindSpecField(path);
    if (row == nullptr) doc->missing.push_back(path + ": no row in common/spec_rules/spec_rules.h");
    if (comment.empty()) doc->missing.push_back(path + ": no comment in spec.proto");
    if (row == nullptr) continue;
    if (!doc->only.empty() && doc->only != path) continue;
    doc->found = true;
    doc->out << "\n### `" << path << "`\n\n"
             << "`" << ProtoType(f) << "` · " << Rules(*row) << "\n\n"
             << comment << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: nightshift-spec-doc SPEC_DESCRIPTOR_SET [FIELD]\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  pb::FileDescriptorSet set;
  if (!in || !set.ParseFromIstream(&in)) {
    std::cerr << argv[1] << ": not a FileDescriptorSet (protoc --include_source_info --descriptor_set_out)\n";
    return 2;
  }
  pb::DescriptorPool pool;
  for (const pb::FileDescriptorProto& file : set.file()) {
    if (pool.BuildFile(file) == nullptr) {
      std::cerr << argv[1] << ": " << file.name() << " does not build\n";
      return 2;
    }
  }
  const pb::Descriptor* spec = pool.FindMessageTypeByName("nightshift.v1.JobSpec");
  if (spec == nullptr) {
    std::cerr << argv[1] << ": no nightshift.v1.JobSpec\n";
    return 2;
  }
  Doc doc;
  if (argc == 3) doc.only = argv[2];
  if (doc.only.empty()) {
    doc.out << "<!-- Generated by nightshift-spec-doc from proto/nightshift/v1/spec.proto and "
               "common/spec_rules/spec_rules.h; do not edit (ctest's spec_doc test fails when it differs: "
               "build/bin/nightshift-spec-doc build/spec.desc > docs/spec.md). -->\n"
            << "# The job spec\n\n"
            << "A job is one `JobSpec` (proto/nightshift/v1/spec.proto), written in YAML or JSON with these "
               "field names. The coordinator validates it on submit and fills the defaults below; an error "
               "names the field (and, in YAML, its line), and nothing is stored. The trainer applies the same "
               "rules when it runs alone under torchrun. \"0 means the default too\": proto3 cannot tell an "
               "absent number from 0, so for those fields both take the default.\n";
  }
  Walk(spec, "", 2, &doc);
  if (!doc.only.empty() && !doc.found) {
    std::cerr << doc.only << ": not a field of the JobSpec\n";
    return 2;
  }
  std::cout << doc.out.str();
  for (const std::string& m : doc.missing) std::cerr << "nightshift-spec-doc: " << m << "\n";
  return doc.missing.empty() ? 0 : 1;
}
