#!/usr/bin/env bash
# Build (once) the Kubernetes binaries for the local GPU cluster: the control plane, and the kubelet that
# runs the cluster's real nodes (localcluster/realnode.py).
#
# Nothing on our registries ships kube-apiserver & co., so we compile them from Debian's own
# `kubernetes` source package (1.20.2) with Debian's Go, and take etcd from Debian's etcd-server.
# The result is cached outside the repository; a later call finds it, verifies it and returns at once.
#
#   localcluster/build.sh            build if needed, print the bin directory as the last line
#   localcluster/build.sh --check    exit 0 if a verified cache exists, 1 otherwise (no side effects)
#
# Two cached sets, each verified by its own SHA256SUMS: bin/ (control plane) and node-bin/ (kubelet). A
# cache that has one set builds only the other. One build at a time per cache (a lock; a second caller waits).
set -euo pipefail

CACHE_DIR="${GPUPORTAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuportal}"
KUBE_VERSION="1.20.2"
BIN_DIR="$CACHE_DIR/kubernetes-$KUBE_VERSION/bin"
# A source tree per build process: a build never works in a tree another one is compiling in or deleting.
SRC_DIR="$CACHE_DIR/kubernetes-$KUBE_VERSION/src.$$"
STAMP="$BIN_DIR/SHA256SUMS"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler)
NODE_BIN_DIR="$CACHE_DIR/kubernetes-$KUBE_VERSION/node-bin"
NODE_STAMP="$NODE_BIN_DIR/SHA256SUMS"
NODE_BINARIES=(kubelet)
LOCK="$CACHE_DIR/kubernetes-$KUBE_VERSION/.build.lock"
script_start=$(date +%s)
SYSTEM_PACKAGES=(golang-go etcd-server rsync jq dpkg-dev make)

say() { printf '[cluster-build] %s\n' "$*" >&2; }
die() { printf '[cluster-build] ERROR: %s\n' "$*" >&2; exit 1; }

cache_ok() {
  [ -f "$STAMP" ] || return 1
  (cd "$BIN_DIR" && sha256sum --quiet --check SHA256SUMS >/dev/null 2>&1) || return 1
  local b
  for b in "${BINARIES[@]}"; do
    "$BIN_DIR/$b" --version >/dev/null 2>&1 || return 1
  done
  command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || return 1
}

node_cache_ok() {
  [ -f "$NODE_STAMP" ] || return 1
  (cd "$NODE_BIN_DIR" && sha256sum --quiet --check SHA256SUMS >/dev/null 2>&1) || return 1
  local b
  for b in "${NODE_BINARIES[@]}"; do
    "$NODE_BIN_DIR/$b" --version >/dev/null 2>&1 || return 1
  done
}

if [ "${1:-}" = "--check" ]; then
  cache_ok && node_cache_ok && exit 0 || exit 1
fi

if cache_ok && node_cache_ok; then
  say "Kubernetes $KUBE_VERSION binaries found in $BIN_DIR and $NODE_BIN_DIR"
  echo "$BIN_DIR"
  exit 0
fi

mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
if ! flock -n 9; then
  say "another build.sh is compiling into $CACHE_DIR; waiting for it to finish"
  flock 9
  if cache_ok && node_cache_ok; then
    say "Kubernetes $KUBE_VERSION binaries found in $BIN_DIR and $NODE_BIN_DIR"
    echo "$BIN_DIR"
    exit 0
  fi
fi

# Source trees of builds that were interrupted (their process is gone) take 2.5 GB each: remove them.
for d in "$CACHE_DIR/kubernetes-$KUBE_VERSION"/src.*; do
  [ -d "$d" ] || continue
  kill -0 "${d##*.}" 2>/dev/null || { say "removing $d (left by an interrupted build)"; rm -rf "$d"; }
done
trap 'rm -rf "$SRC_DIR"' EXIT

# What to build: only the sets that are missing or do not verify.
want=()
if cache_ok; then build_cp=0; else
  build_cp=1; want+=("${BINARIES[@]}")
  [ -d "$BIN_DIR" ] && { say "cache at $BIN_DIR is incomplete or corrupt; rebuilding it"; rm -rf "$BIN_DIR"; }
fi
if node_cache_ok; then build_node=0; else
  build_node=1; want+=("${NODE_BINARIES[@]}")
  [ -d "$NODE_BIN_DIR" ] && { say "cache at $NODE_BIN_DIR is incomplete or corrupt; rebuilding it"; rm -rf "$NODE_BIN_DIR"; }
fi

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    die "need root (or sudo) to run: $* — install it by hand and rerun"; fi
}

# --- system packages ---------------------------------------------------------------------------
missing=()
for p in "${SYSTEM_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SRC_LIST=/etc/apt/sources.list.d/gpuportal-deb-src.sources
need_update=0
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  say "adding a deb-src line for Debian $suite (needed for 'apt-get source kubernetes')"
  as_root tee "$SRC_LIST" >/dev/null <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  need_update=1
fi
if [ ${#missing[@]} -gt 0 ] || [ $need_update -eq 1 ]; then
  say "step 1/4: installing system packages: ${missing[*]:-(none, refreshing package lists)}"
  as_root apt-get update -qq || die "apt-get update failed; check network access to deb.debian.org"
  if [ ${#missing[@]} -gt 0 ]; then
    # etcd-server's maintainer scripts would start a system etcd on :2379; we run our own.
    policy=/usr/sbin/policy-rc.d
    created_policy=0
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
      as_root chmod +x "$policy"
      created_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      || { [ $created_policy -eq 1 ] && as_root rm -f "$policy"; die "apt-get install ${missing[*]} failed"; }
    [ $created_policy -eq 1 ] && as_root rm -f "$policy"
  fi
else
  say "step 1/4: system packages present"
fi

# --- source ---------------------------------------------------------------------------------------
mkdir -p "$SRC_DIR"
tree=$(find "$SRC_DIR" -maxdepth 1 -type d -name "kubernetes-[0-9]*" | head -n1)
if [ -z "$tree" ] || [ ! -f "$tree/.gpuportal-unpacked" ]; then
  say "step 2/4: fetching Debian's kubernetes source package (about 30 MB)"
  rm -rf "${SRC_DIR:?}"/*
  (cd "$SRC_DIR" && apt-get source -qq kubernetes 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2) \
    || die "apt-get source kubernetes failed (is a deb-src line for your suite configured?)"
  tree=$(find "$SRC_DIR" -maxdepth 1 -type d -name "kubernetes-[0-9]*" | head -n1)
  [ -n "$tree" ] || die "source tree not found under $SRC_DIR after apt-get source"
  touch "$tree/.gpuportal-unpacked"
else
  say "step 2/4: source tree present at $tree"
fi

# --- build ------------------------------------------------------------------------------------------
# Debian's tree builds in GOPATH mode: k8s.io/kubernetes must sit under $GOPATH/src.
gopath="$SRC_DIR/.go"
mkdir -p "$gopath/src/k8s.io"
ln -sfn "$tree" "$gopath/src/k8s.io/kubernetes"
targets=""
for b in "${want[@]}"; do targets="$targets cmd/$b"; done
say "step 3/4: compiling$targets (about 5 minutes on 2 cores for the control plane, 4 for the kubelet; progress below)"
start=$(date +%s)
(
  cd "$gopath/src/k8s.io/kubernetes"
  export GOPATH="$gopath" GO111MODULE=off GOFLAGS="" CGO_ENABLED=0 KUBE_GIT_VERSION="v$KUBE_VERSION" \
         KUBE_VERBOSE=1 GOCACHE="$SRC_DIR/.gocache"
  # Go prints nothing while it compiles; a heartbeat shows the build is alive.
  ( while sleep 20; do printf '[cluster-build] [%4ss] still compiling...\n' "$(( $(date +%s) - start ))" >&2; done ) &
  heartbeat=$!
  trap 'kill $heartbeat 2>/dev/null' EXIT
  make WHAT="${targets# }" 2>&1 | grep -v 'type check' | while IFS= read -r line; do
    printf '[cluster-build] [%4ss] %s\n' "$(( $(date +%s) - start ))" "$line" >&2
  done
  exit "${PIPESTATUS[0]}"
) || die "compilation failed; see the output above. Remove $SRC_DIR to start over."

built="$tree/_output/local/go/bin"
[ -d "$built" ] || built=$(dirname "$(find "$tree/_output" -type f -name "${want[0]}" | head -n1)")
# cache_set DIR BINARY...: copy, checksum, and move into place as a whole (never a half-written set).
cache_set() {
  local dir=$1; shift
  say "step 4/4: caching $* in $dir"
  local tmp="$dir.tmp.$$" b
  mkdir -p "$tmp"
  for b in "$@"; do
    [ -x "$built/$b" ] || die "$b was not produced by the build (looked in $built)"
    cp "$built/$b" "$tmp/$b"
  done
  (cd "$tmp" && sha256sum "$@" > SHA256SUMS)
  # The whole build's duration (packages, source, compile), for `make bench` (cluster_cold_build_s);
  # not part of the checksummed set.
  echo "$(( $(date +%s) - script_start ))" > "$tmp/BUILD_SECONDS"
  rm -rf "$dir" && mv "$tmp" "$dir"
}
[ $build_cp -eq 1 ] && cache_set "$BIN_DIR" "${BINARIES[@]}"
[ $build_node -eq 1 ] && cache_set "$NODE_BIN_DIR" "${NODE_BINARIES[@]}"
say "built in $(( $(date +%s) - start ))s"
cache_ok || die "the fresh cache in $BIN_DIR does not verify"
node_cache_ok || die "the fresh cache in $NODE_BIN_DIR does not verify"
# The source tree and Go's build cache take about 2.5 GB; only the binaries are worth keeping.
rm -rf "$SRC_DIR"
echo "$BIN_DIR"
