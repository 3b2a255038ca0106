#!/usr/bin/env bash
# Builds helm (cmd/helm of helm.sh/helm/v3) from the Go module proxy into
# .cache/helm/v<HELM>/helm (kept outside git, reused by later runs; a binary
# already there is not rebuilt), as test/controlplane/build.sh does for the
# Kubernetes binaries. The chart tests (test/e2e/helm-chart.test.ts) call it on
# first use. Prints the binary's path.
#
#   KUBEBOOT_HELM_VERSION  helm release to build (default below)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
helm=${KUBEBOOT_HELM_VERSION:-3.21.4}
helm=${helm#v}
out="$root/.cache/helm/v$helm"
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"; }
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME

log() { printf '[helm-build %s] %s\n' "$(date +%T)" "$*" >&2; }

if [ -x "$out/helm" ]; then log "reusing $out/helm"; echo "$out/helm"; exit 0; fi
if ! command -v go >/dev/null; then
  log "no Go toolchain on PATH and no helm in $out: install Go (1.24 or later) to build it"
  exit 127
fi
mkdir -p "$out"
# One build at a time: test files and checkouts sharing .cache may start cold together.
exec 9>"$out.lock"
flock 9
if [ -x "$out/helm" ]; then log "reusing $out/helm (built meanwhile)"; echo "$out/helm"; exit 0; fi

start=$(date +%s)
log "building helm v$helm from the Go module proxy (a cold build takes minutes on 2 cores)"
# go install pkg@version: the release's own go.mod and go.sum, checked against
# the checksum database. The stamps are those helm's Makefile sets: its
# version, and the Kubernetes version `helm template` and `helm lint` assume
# (1.<client-go's minor>; unset it is 1.20, below a chart's kubeVersion).
gomod=$(go mod download -json "helm.sh/helm/v3@v$helm" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
minor=$(sed -n 's/^\s*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")
[ -n "$minor" ] || { log "no k8s.io/client-go in $gomod"; exit 1; }
pkg=helm.sh/helm/v3
GOBIN="$out/tmp" GOFLAGS=-mod=mod go install -trimpath \
  -ldflags "-s -w -X $pkg/internal/version.version=v$helm -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=$minor -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=$minor" \
  "$pkg/cmd/helm@v$helm" >&2
mv "$out/tmp/helm" "$out/helm"
rmdir "$out/tmp"
log "built helm v$helm in $(( $(date +%s) - start ))s"
echo "$out/helm"
