#!/bin/bash
# function-lengths.sh [N]: the N (default 10) longest functions outside tests/ and bench/,
# as "LINES path:line name" (universal-ctags' end lines). The review rule: none over about 80.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v ctags >/dev/null || { echo "function-lengths: universal-ctags is not installed (scripts/install-deps.sh)" >&2; exit 2; }
git ls-files '*.cc' '*.h' | grep -v -e '^tests/' -e '^bench/' | while read -r f; do
  ctags --kinds-C++=f -x --_xformat="%{end} %n %N $f" --language-force=C++ "$f" |
    awk '$1 != "" { print $1 - $2 + 1, $4 ":" $2, $3 }'
done | sort -rn | head -n "${1:-10}"
