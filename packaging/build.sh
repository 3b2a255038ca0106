#!/usr/bin/env bash
# Builds dist/packages/: kubeboot_<v>_{amd64,arm64}.deb and
# kubeboot-<v>-1.{x86_64,aarch64}.rpm from a clean checkout (npm ci done).
#
# Layout (the same in every package): /usr/lib/kubeboot/node is the project's
# pinned Node for that architecture (the official build, from the npm
# registry's node-linux-<arch> package via scripts/node.sh, stripped),
# /usr/lib/kubeboot/kubeboot.cjs the loader of the esbuild bundle's ES module
# chunks in /usr/lib/kubeboot/lib/<build id>/, /usr/bin/kubeboot a short sh
# wrapper. Chosen over a Node SEA because it needs no
# postject-style injection tooling and leaves the official binary intact
# apart from stripping. Node 24's official Linux builds need glibc >= 2.28
# and libstdc++ from GCC >= 7 (RHEL/Alma 8, Debian 10, Ubuntu 18.10 and
# later); build.sh checks the binary against that before packaging it.
#
# Reruns with unchanged inputs only print the packages (the tests call this
# once per file). KUBEBOOT_PACKAGE_FORCE=1 rebuilds anyway.
# KUBEBOOT_PACKAGE_XZ_LEVEL (default 1): xz -6 saves ~10 % of the size and
# costs several times the build time on two cores.
set -euo pipefail
umask 022
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=dist/packages
mkdir -p .cache dist
# Serialises concurrent builds (two test files, or a test and a developer).
exec 9>.cache/packaging.lock
flock 9

PATH="$(bash scripts/node.sh):$PATH"
node scripts/build.mjs
version=$(node -p 'require("./package.json").version')
node_version=$(node -p 'require("./package.json").kubeboot.node')
maintainer=${KUBEBOOT_MAINTAINER:-"kubeboot maintainers <maintainers@users.noreply.a-seed-7d344b3e.example>"}
xz_level=${KUBEBOOT_PACKAGE_XZ_LEVEL:-1}
# Reproducible: every timestamp is the last commit's.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || stat -c %Y package.json)}
export SOURCE_DATE_EPOCH

debs=("kubeboot_${version}_amd64.deb" "kubeboot_${version}_arm64.deb")
rpms=("kubeboot-${version}-1.x86_64.rpm" "kubeboot-${version}-1.aarch64.rpm")

inputs=$( {
  echo "$version $node_version $SOURCE_DATE_EPOCH $xz_level $maintainer"
  sha256sum dist/kubeboot.cjs "dist/lib/$(cat dist/lib/current)"/*.mjs package-lock.json
  find packaging systemd -type f -print0 | sort -z | xargs -0 sha256sum
} | sha256sum | cut -d' ' -f1)
if [ "${KUBEBOOT_PACKAGE_FORCE:-}" != 1 ] && [ "$(cat "$out/.inputs" 2>/dev/null)" = "$inputs" ] &&
  (cd "$out" && ls "${debs[@]}" "${rpms[@]}" >/dev/null 2>&1); then
  echo "packages up to date:"; for f in "${debs[@]}" "${rpms[@]}"; do echo "  $out/$f"; done
  exit 0
fi

work=$(mktemp -d)
# Packages are built beside the old ones and renamed over them at the end, so
# a test still reading the previous build never finds a file missing.
final=$out
out=$final/.building
trap 'rm -rf "$work" "$out"' EXIT
rm -rf "$out"; mkdir -p "$out"

# Documentation shared by every package, generated once by running the bundle.
node dist/kubeboot.cjs --help >"$work/kubeboot.txt"
{
  printf '.TH KUBEBOOT 1 "%s" "kubeboot %s" "User Commands"\n' "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)" "$version"
  printf '.SH NAME\nkubeboot \\- Kubernetes node TLS bootstrap and certificate renewal agent\n'
  printf '.SH DESCRIPTION\n.nf\n'
  # Plain text in a no-fill block: escape backslashes and leading control characters.
  sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/" "$work/kubeboot.txt"
  printf '.fi\n.SH FILES\n.nf\n/etc/kubeboot/config.yaml\n/etc/default/kubeboot (Debian), /etc/sysconfig/kubeboot (RPM)\n/var/lib/kubeboot\n.fi\n'
} >"$work/kubeboot.1"
gzip -9n "$work/kubeboot.1"
node packaging/third-party-notices.mjs "$root" "$(dirname "$(bash scripts/node.sh)")/LICENSE" | gzip -9n >"$work/THIRD-PARTY-NOTICES.gz"
year=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)

fill() { # file: replaces @KEY@ placeholders
  sed -e "s|@VERSION@|$version|g" -e "s|@NODE_VERSION@|$node_version|g" \
    -e "s|@MAINTAINER@|$maintainer|g" -e "s|@YEAR@|$year|g" "$@"
}

# The pinned Node for one architecture, stripped with a strip that reads it.
stripped_node() { # npm-arch strip-command dest
  local bin
  bin=$(bash scripts/node.sh "$1")/node
  # The binary must not need more than the baseline the packages declare.
  local need
  need=$(readelf -V "$bin" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n | tail -n1)
  [ "$need" = GLIBC_2.28 ] || { echo "node $1 needs $need, packages declare glibc >= 2.28" >&2; exit 1; }
  "$2" --remove-section=.comment --remove-section=.note --strip-all -o "$3" "$bin"
  chmod 0755 "$3"
}

# Files common to the .deb and .rpm of one architecture.
stage_common() { # stage npm-arch strip-command
  local s=$1
  install -d "$s/usr/lib/kubeboot" "$s/usr/bin" "$s/etc/kubeboot" "$s/usr/lib/tmpfiles.d" \
    "$s/usr/lib/systemd/system/kubelet.service.d" "$s/usr/lib/systemd/system/kube-proxy.service.d" \
    "$s/usr/share/kubeboot/cloud-init" "$s/usr/share/doc/kubeboot" "$s/usr/share/man/man1"
  stripped_node "$2" "$3" "$s/usr/lib/kubeboot/node"
  install -m0644 dist/kubeboot.cjs "$s/usr/lib/kubeboot/kubeboot.cjs"
  local build; build=$(cat dist/lib/current)
  install -d "$s/usr/lib/kubeboot/lib/$build"
  install -m0644 "dist/lib/$build"/*.mjs "$s/usr/lib/kubeboot/lib/$build/"
  install -m0755 packaging/files/kubeboot.sh "$s/usr/bin/kubeboot"
  install -m0644 systemd/kubeboot.service systemd/kubeboot-approver.service "$s/usr/lib/systemd/system/"
  install -m0644 systemd/kubelet.service.d/10-kubeboot.conf "$s/usr/lib/systemd/system/kubelet.service.d/"
  install -m0644 systemd/kube-proxy.service.d/10-kubeboot.conf "$s/usr/lib/systemd/system/kube-proxy.service.d/"
  install -m0644 packaging/files/tmpfiles.conf "$s/usr/lib/tmpfiles.d/kubeboot.conf"
  # 0644: the approver reads it as its dynamic user; user-data writes a node's
  # own config (which names the token file, never the token) 0600.
  install -m0644 packaging/files/config.yaml "$s/etc/kubeboot/config.yaml"
  install -m0644 packaging/cloud-init/*.yaml "$s/usr/share/kubeboot/cloud-init/"
  # Written by another part of the project; shipped when present.
  if compgen -G 'packaging/manifests/*.yaml' >/dev/null; then
    install -d "$s/usr/share/kubeboot/manifests"
    install -m0644 packaging/manifests/*.yaml "$s/usr/share/kubeboot/manifests/"
  fi
  # The approver's RBAC (kubectl apply -f), its kustomize base (Kustomization,
  # deployment/) and the overlays beside it (kubectl apply -k).
  local m=$s/usr/share/kubeboot/manifests
  install -d "$m/approver/deployment" "$m/approver-kubelet-serving"
  install -m0644 packaging/manifests/approver/*.yaml packaging/manifests/approver/Kustomization "$m/approver/"
  install -m0644 packaging/manifests/approver/deployment/*.yaml "$m/approver/deployment/"
  install -m0644 packaging/manifests/approver-kubelet-serving/kustomization.yaml "$m/approver-kubelet-serving/"
  install -d "$m/approver-metrics-auth"
  install -m0644 packaging/manifests/approver-metrics-auth/*.yaml "$m/approver-metrics-auth/"
  # Alerting rules (plain and PrometheusRule) and the approver's PodMonitor.
  install -d "$s/usr/share/kubeboot/monitoring"
  install -m0644 packaging/monitoring/*.yaml "$s/usr/share/kubeboot/monitoring/"
  install -m0644 "$work/kubeboot.txt" "$work/THIRD-PARTY-NOTICES.gz" "$s/usr/share/doc/kubeboot/"
  install -m0644 "$work/kubeboot.1.gz" "$s/usr/share/man/man1/"
}

maintscript() { # body-file: a complete POSIX sh script around the shared steps
  printf '#!/bin/sh\nset -e\n\n'
  cat packaging/maintscript.sh
  echo
  cat "$1"
}

build_deb() { # deb-arch npm-arch strip-command file
  local s=$work/deb-$1
  stage_common "$s" "$2" "$3"
  install -d "$s/DEBIAN" "$s/etc/default" "$s/usr/share/lintian/overrides"
  install -m0644 packaging/deb/lintian-overrides "$s/usr/share/lintian/overrides/kubeboot"
  install -m0600 packaging/files/environment "$s/etc/default/kubeboot"  # may hold KUBEBOOT_TOKEN
  fill packaging/deb/copyright.in >"$s/usr/share/doc/kubeboot/copyright"
  # A native version (no Debian revision), hence changelog.gz, not changelog.Debian.gz.
  {
    printf 'kubeboot (%s) unstable; urgency=medium\n\n  * Release %s.\n\n' "$version" "$version"
    printf ' -- %s  %s\n' "$maintainer" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
  } | gzip -9n >"$s/usr/share/doc/kubeboot/changelog.gz"
  for script in postinst prerm postrm; do
    maintscript "packaging/deb/$script" >"$s/DEBIAN/$script"
    chmod 0755 "$s/DEBIAN/$script"
  done
  printf '/etc/default/kubeboot\n/etc/kubeboot/config.yaml\n' >"$s/DEBIAN/conffiles"
  (cd "$s" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$s/DEBIAN/md5sums"
  local size
  size=$(du -sk --exclude=DEBIAN "$s" | cut -f1)
  fill packaging/deb/control.in | sed -e "s|@ARCH@|$1|" -e "s|@INSTALLED_SIZE@|$size|" >"$s/DEBIAN/control"
  find "$s" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  dpkg-deb --root-owner-group -Zxz -z"$xz_level" --threads-max=2 -b "$s" "$out/$4" >/dev/null
}

build_rpm() { # rpm-arch npm-arch strip-command
  local s=$work/rpm-$1
  stage_common "$s" "$2" "$3"
  install -d "$s/etc/sysconfig" "$s/usr/share/licenses/kubeboot"
  install -m0600 packaging/files/environment "$s/etc/sysconfig/kubeboot"  # may hold KUBEBOOT_TOKEN
  install -m0644 /usr/share/common-licenses/Apache-2.0 "$s/usr/share/licenses/kubeboot/LICENSE"
  local spec=$work/kubeboot-$1.spec
  # rpm reads scriptlet bodies literally once pasted: the shared steps go in
  # through awk so their text needs no escaping for sed.
  fill packaging/rpm/kubeboot.spec.in |
    sed -e "s|@STAGE@|$s|" -e "s|@PAYLOAD@|w${xz_level}T.xzdio|" \
      -e "s|@CHANGELOG_DATE@|$(date -u -d "@$SOURCE_DATE_EPOCH" '+%a %b %d %Y')|" |
    awk -v lib=packaging/maintscript.sh '/^@MAINTSCRIPT@$/ { while ((getline l < lib) > 0) print l; close(lib); next } { print }' >"$spec"
  rpmbuild --quiet -bb --target "$1" \
    --define "_topdir $work/rpmbuild-$1" --define "_rpmdir $root/$out" \
    --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
    "$spec" >"$work/rpmbuild-$1.log" 2>&1 || { cat "$work/rpmbuild-$1.log" >&2; exit 1; }
}

build_deb amd64 x86_64 strip "${debs[0]}"
build_deb arm64 aarch64 aarch64-linux-gnu-strip "${debs[1]}"
build_rpm x86_64 x86_64 strip
build_rpm aarch64 aarch64 aarch64-linux-gnu-strip
(cd "$out" && sha256sum "${debs[@]}" "${rpms[@]}" >SHA256SUMS)
for f in "${debs[@]}" "${rpms[@]}" SHA256SUMS; do mv -f "$out/$f" "$final/$f"; done
# Packages of an earlier version.
keep=(); for f in "${debs[@]}" "${rpms[@]}"; do keep+=(! -name "$f"); done
find "$final" -maxdepth 1 -type f -name 'kubeboot*' "${keep[@]}" -delete
echo "$inputs" >"$final/.inputs"
echo "built:"; for f in "${debs[@]}" "${rpms[@]}"; do echo "  $final/$f ($(du -h "$final/$f" | cut -f1))"; done
