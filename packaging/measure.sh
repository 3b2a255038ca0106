#!/usr/bin/env bash
# Prints the numbers worth tracking for the packages: sizes, installed size,
# the unit's systemd-analyze exposure, and the cold start of the installed
# `kubeboot --version` against a bare `node -e 0` of the same shipped Node.
# Needs root (chroot); uses hyperfine when installed, else a 20-run loop.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash packaging/build.sh >/dev/null
version=$(node -p 'require("./package.json").version' 2>/dev/null || sed -n 's/.*"version": "\([^"]*\)".*/\1/p' package.json | head -n1)
deb=dist/packages/kubeboot_${version}_amd64.deb

echo "== package sizes"
(cd dist/packages && ls -l --block-size=K ./*.deb ./*.rpm | awk '{print "  " $5 "\t" $9}')
echo "== installed size (dpkg Installed-Size): $(dpkg-deb -f "$deb" Installed-Size) KiB"

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
dpkg-deb -x "$deb" "$tree"
echo "== $(systemd-analyze security --offline=true --root="$tree" kubeboot.service | grep 'Overall exposure')"

echo "== cold start (inside the unpacked package, via chroot, so /usr/bin/kubeboot is the real wrapper)"
# The wrapper needs /bin/sh and the Node binary's shared libraries in the root.
for lib in $(ldd "$tree/usr/lib/kubeboot/node" /bin/sh | grep -o '/[^ ]*\.so[^ ]*' | sort -u); do
  install -D "$lib" "$tree$lib"
done
install -D /bin/sh "$tree/bin/sh"
in_root=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot "$tree")
if command -v hyperfine >/dev/null; then
  hyperfine -N --warmup 3 --runs 20 --style none --export-markdown "$tree/bench.md" \
    -n 'kubeboot --version' "${in_root[*]} /usr/bin/kubeboot --version" \
    -n 'node -e 0' "${in_root[*]} /usr/lib/kubeboot/node -e 0" >/dev/null
  cat "$tree/bench.md"
else
  for cmd in "/usr/bin/kubeboot --version" "/usr/lib/kubeboot/node -e 0"; do
    start=$(date +%s%N)
    for _ in $(seq 20); do "${in_root[@]}" $cmd >/dev/null; done
    echo "  $cmd: $(( ($(date +%s%N) - start) / 20000000 )) ms mean of 20"
  done
fi
