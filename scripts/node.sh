#!/usr/bin/env bash
# Puts the project's pinned Node (package.json "kubeboot.node") into
# .cache/node/v<version>-<arch>/ from the npm registry's per-platform package
# and prints its bin directory. The machine's own Node is used only as the
# npm client that fetches it; everything after runs on the pinned Node.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/.*"node": "\([0-9.]*\)".*/\1/p' "$root/package.json" | head -n1)
arch=${1:-$(uname -m)}
case "$arch" in x86_64|amd64|x64) npmarch=x64 ;; aarch64|arm64) npmarch=arm64 ;; *) echo "unsupported arch $arch" >&2; exit 1 ;; esac
dest="$root/.cache/node/v$version-$npmarch"
if [ ! -x "$dest/bin/node" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "node-linux-$npmarch@$version" >/dev/null)
  mkdir -p "$dest"; tar -xzf "$tmp"/node-linux-"$npmarch"-*.tgz -C "$dest" --strip-components=1
  chmod +x "$dest/bin/node"
fi
echo "$dest/bin"
