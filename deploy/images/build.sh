#!/bin/bash
# Builds Nightshift's two images from Debian 12 and this tree's build, with no registry
# and no base image to pull: a Debian root made by debootstrap with exactly the packages
# the programs link (found with ldd and dpkg -S), the programs in /usr/local/bin, made into
# an image by buildah and written as an OCI archive an operator imports (`podman load -i`,
# `skopeo copy oci-archive:FILE docker://REGISTRY/...`, `ctr images import`).
#
#   nightshift-control  nightshift-coordinator and the nightshift CLI
#   nightshift-worker   those, nightshift-worker, -trainer, -prepare and -predict, and
#                       LibTorch with its CUDA libraries at the paths the programs were
#                       linked against (the venv's torch/lib and nvidia/ trees, libcudart)
#
# Usage: deploy/images/build.sh [--only control|worker] [--build DIR] [--out DIR]
#                               [--tag TAG] [--mirror URL]
# Needs root, debootstrap, buildah and the built programs (ninja -C build nightshift-programs).
# The worker image holds the CUDA libraries LibTorch loads: several GB (docs/operating.md).
set -euo pipefail

HERE="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$HERE/build"
OUT=""
ONLY=""
TAG="$(git -C "$HERE" describe --always --dirty 2>/dev/null || echo dev)"
MIRROR="http://deb.debian.org/debian"
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --tag) TAG="$2"; shift 2 ;;
    --mirror) MIRROR="$2"; shift 2 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-$BUILD/images}"
BIN="$BUILD/bin"
CONTROL=(nightshift-coordinator nightshift)
WORKER=("${CONTROL[@]}" nightshift-worker nightshift-trainer nightshift-prepare nightshift-predict)
for p in "${WORKER[@]}"; do
  [ -x "$BIN/$p" ] || { echo "build.sh: $BIN/$p is missing: build the programs first" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "build.sh: needs root (debootstrap, buildah)" >&2; exit 2; }
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}"  # works inside containers and on any disk
WORK="$(mktemp -d /tmp/nightshift-images.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

# The Debian packages that own the shared libraries the programs load, except those of
# LibTorch and CUDA (copied as they are).
packages_for() {
  for p in "$@"; do ldd "$BIN/$p" | awk '/=> \//{print $3}'; done | sort -u |
    grep -v -e '^/opt/nightshift/' -e '^/usr/local/cuda' |
    while read -r f; do
      owner="$(dpkg -S "$f" 2>/dev/null || dpkg -S "/usr$f" 2>/dev/null || true)"
      [ -n "$owner" ] && echo "${owner%%:*}"
    done | sort -u | paste -sd, -
}

# A Debian 12 root with `packages` (comma-separated), trimmed of what no program reads.
make_root() {
  local root="$1" packages="$2"
  debootstrap --variant=minbase --include="ca-certificates,$packages" bookworm "$root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc \
    "$root"/usr/share/man "$root"/usr/share/info "$root"/usr/share/locale
  chroot "$root" useradd --system --no-create-home --shell /usr/sbin/nologin nightshift-job
  # The user the pods of --cluster kubernetes run the worker as (runAsUser, fsGroup): a
  # fixed id, so that a shared checkpoint volume can be given to it.
  chroot "$root" useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin nightshift
}

# The image `name` from `root`, as OUT/name.tar (an OCI archive), tagged name:TAG.
commit() {
  local name="$1" root="$2" cmd="$3"
  local ctr
  ctr="$(buildah from scratch)"
  buildah copy --quiet "$ctr" "$root" / >/dev/null
  buildah config --env PATH=/usr/local/bin:/usr/bin:/bin --env CUDA_DEVICE_ORDER=PCI_BUS_ID \
    --label org.opencontainers.image.title="$name" --label org.opencontainers.image.version="$TAG" \
    --label org.opencontainers.image.source=https://github.com/nightshift/nightshift --cmd "$cmd" "$ctr"
  buildah commit --quiet --squash "$ctr" "localhost/$name:$TAG" >/dev/null
  buildah rm "$ctr" >/dev/null
  rm -f "$OUT/$name.tar"
  buildah push --quiet "localhost/$name:$TAG" "oci-archive:$OUT/$name.tar:localhost/$name:$TAG"
  buildah rmi "localhost/$name:$TAG" >/dev/null
  echo "$name: $OUT/$name.tar ($(du -h "$OUT/$name.tar" | cut -f1), localhost/$name:$TAG)"
}

start=$SECONDS
if [ "$ONLY" != worker ]; then
  make_root "$WORK/control" "$(packages_for "${CONTROL[@]}")"
  for p in "${CONTROL[@]}"; do install -m 0755 "$BIN/$p" "$WORK/control/usr/local/bin/$p"; done
  commit nightshift-control "$WORK/control" nightshift-coordinator
  rm -rf "$WORK/control"
fi
if [ "$ONLY" != control ]; then
  make_root "$WORK/worker" "$(packages_for "${WORKER[@]}")"
  for p in "${WORKER[@]}"; do install -m 0755 "$BIN/$p" "$WORK/worker/usr/local/bin/$p"; done
  # LibTorch and CUDA where the programs' run paths look for them.
  torch_lib="$(ldd "$BIN/nightshift-trainer" | awk '/libtorch_cpu.so/{print $3}' | xargs dirname)"
  site="$(dirname "$(dirname "$torch_lib")")"
  mkdir -p "$WORK/worker$torch_lib" "$WORK/worker$site/nvidia"
  cp -a "$torch_lib"/. "$WORK/worker$torch_lib/"
  [ -d "$site/nvidia" ] && cp -a "$site/nvidia"/. "$WORK/worker$site/nvidia/"
  for f in $(ldd "$BIN/nightshift-trainer" | awk '/=> \/usr\/local\/cuda/{print $3}'); do
    mkdir -p "$WORK/worker$(dirname "$f")"
    cp -aL "$f" "$WORK/worker$f"
  done
  commit nightshift-worker "$WORK/worker" nightshift-worker
fi
echo "images built in $((SECONDS - start)) s"
