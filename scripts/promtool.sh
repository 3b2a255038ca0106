#!/usr/bin/env bash
# Puts promtool (from Debian's prometheus package) into
# .cache/promtool/<version>/ and prints its path. The .deb is unpacked with
# dpkg-deb -x: no Prometheus service is installed or started.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^  Candidate: //p')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  apt-get update -qq >/dev/null
  version=$(apt-cache policy prometheus | sed -n 's/^  Candidate: //p')
fi
dest=$root/.cache/promtool/$version
if [ ! -x "$dest/promtool" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "prometheus=$version" >/dev/null 2>&1)
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
  mkdir -p "$dest"
  install -m0755 "$tmp/x/usr/bin/promtool" "$dest/promtool.tmp"
  mv "$dest/promtool.tmp" "$dest/promtool"
fi
echo "$dest/promtool"
