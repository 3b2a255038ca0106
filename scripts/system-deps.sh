#!/usr/bin/env bash
# Installs the Debian packages the build and tests use, when missing:
# packaging tools (packaging/deps.txt), systemd-notify/socat for the
# readiness tests, systemd-nspawn for the tests under a booted systemd
# (test/systemd), qemu-aarch64-static for the arm64 packages' tests, and
# for the real node's tests (test/e2e/realnode-*) iproute2 (veth pairs,
# network namespaces) and the nft/iptables/conntrack commands kube-proxy runs,
# and podman with runc (crun refuses this machine's hybrid cgroups) and skopeo
# for the image's tests, and swtpm, swtpm-tools, tpm2-tools and
# libtss2-tcti-swtpm0 for the TPM tests (test/support/swtpm.ts). Needs root
# (CI and the dev machines run as root).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
want=(systemd python3 systemd-container qemu-user-static iproute2 nftables iptables conntrack podman runc skopeo swtpm swtpm-tools tpm2-tools libtss2-tcti-swtpm0)
[ -f "$root/packaging/deps.txt" ] && mapfile -t -O "${#want[@]}" want < <(grep -v '^\s*#' "$root/packaging/deps.txt" | sed '/^\s*$/d')
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then echo "system-deps: missing Debian packages (install as root): ${missing[*]}" >&2; exit 1; fi
echo "system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
