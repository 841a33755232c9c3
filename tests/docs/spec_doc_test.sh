#!/bin/sh
# docs/spec.md is exactly what nightshift-spec-doc generates from spec.proto's comments and
# the rule table (common/spec_rules/spec_rules.h); the generator itself fails when a field
# has no comment or no row.
# Usage: spec_doc_test.sh NIGHTSHIFT_SPEC_DOC SPEC_DESC DOCS_SPEC_MD
set -u
out=$("$1" "$2") || { echo "spec_doc: $1 failed (see above)"; exit 1; }
if ! printf '%s\n' "$out" | diff -u "$3" -; then
  echo "spec_doc: $3 is stale; regenerate it: $1 $2 > $3"
  exit 1
fi
