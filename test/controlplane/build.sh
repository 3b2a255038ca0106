#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubeadm and etcd from the Go
# module proxy into .cache/k8s/v<K8S>/ (kept outside git, reused by later runs;
# a binary already there is not rebuilt). kubeadm makes the cluster side of a
# kubeadm cluster (its bootstrap-token, upload-config and kube-proxy phases)
# on the tests' plane; it shares most packages with the others.
# With --node also a node's binaries, of the same release and from the same
# wrapper module: kubelet, kube-proxy and fakecri (kube/fakecri/, the
# in-memory container runtime the tests' kubelet talks to).
# With --kubelet only the kubelet of KUBEBOOT_K8S_VERSION (the version-skew
# tests run an older kubelet against the default plane, on its fakecri).
#
#   KUBEBOOT_K8S_VERSION   Kubernetes release to build (default: the committed wrapper's)
#   KUBEBOOT_ETCD_VERSION  etcd release to build       (default: the committed wrapper's)
#   KUBEBOOT_BUILD_KUBECTL=1  also build kubectl (done anyway when none is on PATH)
#
# The committed wrappers (kube/, etcd/) pin the default versions with go.sum.
# Another version is built from a generated copy of the wrapper in the cache,
# so a version matrix needs no edits to the tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

default_k8s=$(grep -oE 'k8s.io/kubernetes v[0-9]+\.[0-9]+\.[0-9]+' "$here/kube/go.mod" | head -n1 | cut -d' ' -f2)
default_etcd=$(grep -oE 'go.etcd.io/etcd/server/v3 v[0-9]+\.[0-9]+\.[0-9]+' "$here/etcd/go.mod" | head -n1 | cut -d' ' -f2)
k8s=${KUBEBOOT_K8S_VERSION:-$default_k8s}
etcd=${KUBEBOOT_ETCD_VERSION:-$default_etcd}
k8s=${k8s#v}; etcd=${etcd#v}; default_k8s=${default_k8s#v}; default_etcd=${default_etcd#v}
out="$root/.cache/k8s/v$k8s"
export GOFLAGS=-mod=mod
# CI may start with a thin environment: find the machine's Go and give it a
# home for its caches.
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"; }
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME

log() { printf '[controlplane-build %s] %s\n' "$(date +%T)" "$*" >&2; }

node= kubelet_only=
[ "${1:-}" = --node ] && node=1
[ "${1:-}" = --kubelet ] && kubelet_only=1

# The e2e tests drive the cluster with kubectl too; the machine's is preferred.
cmds="kube-apiserver kube-controller-manager kubeadm"
if [ -n "${KUBEBOOT_BUILD_KUBECTL:-}" ] || ! command -v kubectl >/dev/null; then cmds="$cmds kubectl"; fi
[ -n "$node" ] && cmds="$cmds kubelet kube-proxy"
[ -n "$kubelet_only" ] && cmds=kubelet

have() {
  [ -n "$kubelet_only" ] || [ -x "$out/etcd-$etcd" ] || return 1
  [ -z "$node" ] || [ -x "$out/fakecri" ] || return 1
  local cmd; for cmd in $cmds; do [ -x "$out/$cmd" ] || return 1; done
}
if have; then
  log "reusing binaries in $out"
  echo "$out"; exit 0
fi
if ! command -v go >/dev/null; then
  log "no Go toolchain on PATH and no binaries in $out: install Go (1.24 or later) to build them"
  exit 127
fi
mkdir -p "$out"
# One build at a time per version: test files (and checkouts sharing .cache)
# may all start on a cold cache; the second waits, then finds the binaries.
exec 9>"$out.lock"
flock 9
if have; then log "reusing binaries in $out (built meanwhile)"; echo "$out"; exit 0; fi

# Wrapper module for a Kubernetes version: k8s.io/kubernetes pins its staging
# modules at v0.0.0, so each one is replaced with its published v0.<minor>.<patch>.
# The list comes from the release's own go.mod, never guessed.
prepare_kube() {
  local dir=$1
  rm -rf "$dir/fakecri"
  [ -n "$kubelet_only" ] || cp -r "$here/kube/fakecri" "$dir/"
  if [ "$k8s" = "$default_k8s" ] && [ -z "$kubelet_only" ]; then cp "$here/kube/go.mod" "$here/kube/go.sum" "$here/kube/tools.go" "$dir/"; return; fi
  local mod; mod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@v$k8s" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  local gov; gov=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$mod")
  local staging="v0.${k8s#1.}"
  {
    echo "module kubeboot.test/controlplane/kube"; echo; echo "go $gov"; echo
    echo "require k8s.io/kubernetes v$k8s"; echo
    echo "replace ("
    sed -n 's/^\s*\(k8s.io\/[a-z0-9-]*\) => \.\/staging.*/\t\1 => \1 '"$staging"'/p' "$mod"
    echo ")"
  } > "$dir/go.mod"
  if [ -n "$kubelet_only" ]; then
    # Only the kubelet's packages: tidy and download nothing the plane needs.
    printf '//go:build tools\n\npackage kube\n\nimport _ "k8s.io/kubernetes/cmd/kubelet"\n' > "$dir/tools.go"
  else
    cp "$here/kube/tools.go" "$dir/"
  fi
  tidy_with_fallback "$dir" "$staging"
}

# go mod tidy; when the proxy refuses one staging module at the release's
# own patch (403 "not available"), that module is replaced with the newest patch
# of the same minor it serves (staging modules of one minor share their API;
# seen for k8s.io/kube-scheduler v0.31.14, of which the kubelet only imports
# API types). Says so on stderr.
tidy_with_fallback() {
  local dir=$1 staging=$2 err mod minor alt i
  for i in 1 2 3 4 5 6 7 8; do
    err=$( (cd "$dir" && go mod tidy) 2>&1 ) && { printf '%s\n' "$err" >&2; return 0; }
    mod=$(printf '%s\n' "$err" | sed -n 's/.*\(k8s\.io\/[a-z0-9-]*\)@'"$staging"': reading .*/\1/p' | head -n1)
    if [ -z "$mod" ]; then printf '%s\n' "$err" >&2; return 1; fi
    minor=${staging%.*}
    alt=$(cd "$dir" && go list -m -versions "$mod" | tr ' ' '\n' | grep -E "^${minor//./\\.}\.[0-9]+$" | sort -V | tail -n1)
    if [ -z "$alt" ] || [ "$alt" = "$staging" ]; then printf '%s\n' "$err" >&2; return 1; fi
    log "the module proxy does not serve $mod@$staging; using $mod@$alt (same minor)"
    sed -i "s#^\t$mod => $mod .*#\t$mod => $mod $alt#" "$dir/go.mod"
  done
  return 1
}

prepare_etcd() {
  local dir=$1
  if [ "$etcd" = "$default_etcd" ]; then cp "$here/etcd/go.mod" "$here/etcd/go.sum" "$here/etcd/tools.go" "$dir/"; return; fi
  printf 'module kubeboot.test/controlplane/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$etcd" > "$dir/go.mod"
  cp "$here/etcd/tools.go" "$dir/"
  (cd "$dir" && go mod tidy >&2)
}

start=$(date +%s)
work="$root/.cache/k8s/src-v$k8s"
[ -n "$kubelet_only" ] && work="$work-kubelet"
mkdir -p "$work/kube" "$work/etcd"
prepare_kube "$work/kube"
[ -n "$kubelet_only" ] || prepare_etcd "$work/etcd"

ver="-X k8s.io/component-base/version.gitVersion=v$k8s -X k8s.io/client-go/pkg/version.gitVersion=v$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$k8s" | cut -d. -f2)"
log "downloading modules for Kubernetes v$k8s${kubelet_only:+ (kubelet only)}"
(cd "$work/kube" && go mod download >&2)
[ -n "$kubelet_only" ] || (cd "$work/etcd" && go mod download >&2)
if [ -z "$kubelet_only" ] && [ ! -x "$out/etcd-$etcd" ]; then
  log "building etcd v$etcd"
  (cd "$work/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/etcd-$etcd.tmp" go.etcd.io/etcd/server/v3 >&2)
  mv "$out/etcd-$etcd.tmp" "$out/etcd-$etcd"
fi
for cmd in $cmds; do
  [ -x "$out/$cmd" ] && continue
  log "building $cmd v$k8s (a cold build takes many minutes on 2 cores)"
  began=$(date +%s)
  (cd "$work/kube" && go build -trimpath -ldflags "-s -w $ver" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" >&2)
  mv "$out/$cmd.tmp" "$out/$cmd"
  log "built $cmd in $(( $(date +%s) - began ))s"
done
if [ -n "$node" ] && [ ! -x "$out/fakecri" ]; then
  log "building fakecri against k8s.io/cri-client of v$k8s"
  (cd "$work/kube" && go build -trimpath -ldflags "-s -w" -o "$out/fakecri.tmp" ./fakecri >&2)
  mv "$out/fakecri.tmp" "$out/fakecri"
fi
log "built in $(( $(date +%s) - start ))s"
echo "$out"
