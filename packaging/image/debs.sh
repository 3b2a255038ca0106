#!/usr/bin/env bash
# Fetches the C runtime the official Node binary links against (glibc,
# libgcc_s, libstdc++; `ldd node`) for amd64 and arm64 as Debian bookworm
# .debs, with a private apt instance under .cache/image/apt: the machine's apt
# configuration, architectures and package state are left alone. apt verifies
# the archive with Debian's keyring, as for any install. Prints the directory
# holding the .debs.
#
# Cached: a rerun uses the .debs already there, so rebuilding the image gives
# the same bytes. KUBEBOOT_IMAGE_REFRESH_DEBS=1 fetches the current versions
# (security updates); the SBOM records which were used.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
d=$root/.cache/image/apt
want=(libc6 libgcc-s1 libstdc++6 gcc-12-base)
mkdir -p "$root/.cache/image"
exec 8>"$root/.cache/image/apt.lock"
flock 8
have() { for p in "${want[@]}"; do for a in amd64 arm64; do compgen -G "$d/debs/${p}_*_$a.deb" >/dev/null || return 1; done; done; }
if [ "${KUBEBOOT_IMAGE_REFRESH_DEBS:-}" != 1 ] && have; then echo "$d/debs"; exit 0; fi

# The machine's Debian mirror (as the packaging tests find it), else deb.debian.org.
mirror=${KUBEBOOT_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(sed -n 's|^URIs:[[:space:]]*\(\S*/debian\)/\?[[:space:]]*$|\1|p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
  mirror=${mirror:-http://deb.debian.org/debian}
fi
security=${KUBEBOOT_DEBIAN_SECURITY_MIRROR:-${mirror}-security}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
rm -rf "$d"; mkdir -p "$d/lists/partial" "$d/archives/partial" "$d/debs" "$d/parts"
: >"$d/status"
{
  echo "deb [arch=amd64,arm64 signed-by=$keyring] $mirror bookworm main"
  echo "deb [arch=amd64,arm64 signed-by=$keyring] $mirror bookworm-updates main"
  echo "deb [arch=amd64,arm64 signed-by=$keyring] $security bookworm-security main"
} >"$d/sources.list"
opts=(-qq -o "Dir::Etc::SourceList=$d/sources.list" -o "Dir::Etc::SourceParts=$d/parts"
  -o "Dir::Etc::Preferences=$d/none" -o "Dir::Etc::PreferencesParts=$d/parts"
  -o "Dir::State::Lists=$d/lists" -o "Dir::State::status=$d/status" -o "Dir::Cache=$d/cache"
  -o "Dir::Cache::archives=$d/archives" -o APT::Architecture=amd64
  -o APT::Architectures::=amd64 -o APT::Architectures::=arm64 -o APT::Sandbox::User=root -o Debug::NoLocking=1)
apt-get "${opts[@]}" update >&2
pkgs=(); for p in "${want[@]}"; do pkgs+=("$p:amd64" "$p:arm64"); done
(cd "$d/debs" && apt-get "${opts[@]}" download "${pkgs[@]}" >&2)
# The indexes are only needed to download; 45 MB not worth keeping.
rm -rf "$d/lists" "$d/cache"
echo "$d/debs"
