#!/usr/bin/env bash
# Builds test/bench/kubelet-bootstrap (the kubelet's LoadClientCert as a
# program) inside the control plane's wrapper module, so it uses the same
# pinned k8s.io/kubernetes and the warm Go build cache. Prints its path.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(bash "$root/test/controlplane/build.sh")
version=$(basename "$dir")
src="$root/.cache/k8s/src-$version/kube"
[ -f "$src/go.mod" ] || { echo "no wrapper module in $src" >&2; exit 1; }
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
export GOFLAGS=-mod=mod
mkdir -p "$src/kubeletbootstrap"
cp "$root/test/bench/kubelet-bootstrap/main.go" "$src/kubeletbootstrap/main.go"
if [ ! -x "$dir/kubelet-bootstrap" ] || [ "$root/test/bench/kubelet-bootstrap/main.go" -nt "$dir/kubelet-bootstrap" ]; then
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$dir/kubelet-bootstrap.tmp" ./kubeletbootstrap >&2)
  mv "$dir/kubelet-bootstrap.tmp" "$dir/kubelet-bootstrap"
fi
echo "$dir/kubelet-bootstrap"
