// Loading and checking job specs. One spec format: the JobSpec protobuf, written by users
// in YAML or JSON (JSON is YAML) with the protobuf field names.
#ifndef NIGHTSHIFT_COMMON_SPEC_H_
#define NIGHTSHIFT_COMMON_SPEC_H_

#include <string>

#include "common/status.h"
#include "nightshift/v1/spec.pb.h"

namespace nightshift {

// Parses YAML or JSON text into a JobSpec, checked key by key against the message:
// a syntax error, an unknown field or a value of the wrong type is INVALID_ARGUMENT
// naming the field and its line. Then fills defaults and validates (as below), with the
// line of the offending field in the message when the text has one.
StatusOr<v1::JobSpec> LoadJobSpec(const std::string& text);

// Fills defaults for unset fields, then checks every field: the spec's one set of rules
// (common/spec_rules/spec_rules.h) applied to the proto. Errors are INVALID_ARGUMENT and
// start with the field's path ("model.arch: ...").
Status DefaultAndValidateJobSpec(v1::JobSpec* spec);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_SPEC_H_
