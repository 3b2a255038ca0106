#!/usr/bin/env bash
# `npm run image`: the approver's OCI image, amd64 and arm64 in one index,
# written without a container engine (tar, gzip and sha256 in
# packaging/image/oci.mjs), so the same inputs give the same digest.
#
#   dist/image/oci/                        OCI image layout (index.json → the image index)
#   dist/image/kubeboot-<v>.oci.tar        the same layout as one oci-archive
#   dist/image/kubeboot-<v>-<arch>.spdx.json  SBOM per architecture (also in the image)
#   dist/image/digest                      sha256 of the image index (what a registry shows)
#
# Root filesystem (no shell, no package manager):
#   /usr/lib/kubeboot/node                 the pinned Node (package.json kubeboot.node), stripped,
#                                          the same binary the .deb and .rpm ship
#   /usr/lib/kubeboot/kubeboot.cjs, lib/   the bundle (scripts/build.mjs), as in the packages
#   /lib/<triplet>/, /usr/lib/<triplet>/   glibc, libgcc_s, libstdc++ from Debian bookworm (debs.sh):
#                                          only the libraries `ldd node` names, and the loader
#   /etc/passwd, /etc/group                root and nonroot (65532), as distroless images have
#   /usr/share/doc/                        licences: Node's, the npm packages', the Debian packages'
#   /usr/share/doc/kubeboot/sbom.spdx.json the SBOM
# No CA bundle: the approver trusts the API server through the mounted
# service-account ca.crt (agent/approver/connect.ts), and Node carries
# Mozilla's root store in the binary for anything else.
#
# Usage: build.sh [OUT_DIR]   (default dist/image). Inputs unchanged since the
# last build in OUT_DIR: nothing is rebuilt. KUBEBOOT_IMAGE_FORCE=1 rebuilds.
# KUBEBOOT_IMAGE_GZIP_LEVEL (default 6).
set -euo pipefail
umask 022
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=$(realpath -m "${1:-dist/image}")
mkdir -p "$out" .cache/image
exec 9>"$out/.lock"
flock 9

PATH="$(bash scripts/node.sh):$PATH"
export LC_ALL=C TZ=UTC
node scripts/build.mjs
version=$(node -p 'require("./package.json").version')
node_version=$(node -p 'require("./package.json").kubeboot.node')
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || stat -c %Y package.json)}
revision=${KUBEBOOT_IMAGE_REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
# The source label is a URL people can open: the origin remote only when it is
# https (a clone from a local path or over ssh is not), with any user:password@
# taken out so no credential ends up in an image label.
remote=$(git config --get remote.origin.url 2>/dev/null || true)
case "$remote" in
  https://*) default_source=$(printf '%s' "$remote" | sed -E 's#^https://[^/@]*@#https://#') ;;
  *) default_source=https://a-seed-7d344b3e.example/kubeboot ;;
esac
source_url=${KUBEBOOT_IMAGE_SOURCE:-$default_source}
gzip_level=${KUBEBOOT_IMAGE_GZIP_LEVEL:-6}
export SOURCE_DATE_EPOCH
x64_bin=$(bash scripts/node.sh x64)
arm64_bin=$(bash scripts/node.sh arm64)
debs=$(bash packaging/image/debs.sh)
build=$(cat dist/lib/current)

inputs=$( {
  echo "$version $node_version $SOURCE_DATE_EPOCH $revision $source_url $gzip_level"
  sha256sum dist/kubeboot.cjs "dist/lib/$build"/*.mjs package-lock.json "$x64_bin/node" "$arm64_bin/node" "$debs"/*.deb
  find packaging/image -type f -print0 | sort -z | xargs -0 sha256sum
} | sha256sum | cut -d' ' -f1)
archive=kubeboot-$version.oci.tar
if [ "${KUBEBOOT_IMAGE_FORCE:-}" != 1 ] && [ "$(cat "$out/.inputs" 2>/dev/null)" = "$inputs" ] && [ -f "$out/$archive" ]; then
  echo "image up to date: $out/$archive $(cat "$out/digest")"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The part every architecture shares: one layer, one digest.
app=$work/app
install -d "$app/usr/lib/kubeboot/lib/$build" "$app/etc" "$app/usr/share/doc/kubeboot"
install -m0644 dist/kubeboot.cjs "$app/usr/lib/kubeboot/kubeboot.cjs"
install -m0644 "dist/lib/$build"/*.mjs "$app/usr/lib/kubeboot/lib/$build/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$app/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$app/etc/group"
chmod 0644 "$app/etc/passwd" "$app/etc/group"
node packaging/third-party-notices.mjs "$root" "$x64_bin/../LICENSE" >"$app/usr/share/doc/kubeboot/THIRD-PARTY-NOTICES"
chmod 0644 "$app/usr/share/doc/kubeboot/THIRD-PARTY-NOTICES"

# The part of one architecture: the C runtime and Node.
runtime() { # dir deb-arch triplet node-bin strip
  local r=$1 x=$work/x-$2 p
  install -d "$r/usr/lib/kubeboot" "$r/usr/share/doc/kubeboot" "$r/lib/$3" "$r/usr/lib/$3"
  for p in libc6 libgcc-s1 libstdc++6 gcc-12-base; do
    rm -rf "$x"; dpkg-deb -x "$debs/${p}_"*"_$2.deb" "$x"
    if [ -f "$x/usr/share/doc/$p/copyright" ]; then
      install -d "$r/usr/share/doc/$p"; install -m0644 "$x/usr/share/doc/$p/copyright" "$r/usr/share/doc/$p/"
    fi
    case $p in
      libc6)
        for f in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libnss_files.so.2 libnss_dns.so.2 ld-linux-*.so.*; do
          cp -a "$x/lib/$3/"$f "$r/lib/$3/"
        done
        # The loader at the path the ELF interpreter names (/lib64/... or /lib/...).
        if [ -d "$x/lib64" ]; then install -d "$r/lib64"; cp -a "$x/lib64/". "$r/lib64/"; fi
        cp -a "$x/lib/"ld-linux-* "$r/lib/" 2>/dev/null || true ;;
      libgcc-s1) cp -a "$x/lib/$3/libgcc_s.so.1" "$r/lib/$3/" ;;
      libstdc++6) cp -a "$x/usr/lib/$3/"libstdc++.so.6* "$r/usr/lib/$3/" ;;
    esac
  done
  "$5" --remove-section=.comment --remove-section=.note --strip-all -o "$r/usr/lib/kubeboot/node" "$4/node"
  chmod 0755 "$r/usr/lib/kubeboot/node"
  install -d "$r/usr/share/doc/node"; install -m0644 "$4/../LICENSE" "$r/usr/share/doc/node/LICENSE"
  node packaging/image/sbom.mjs --root "$root" --arch "$2" --node-version "$node_version" --debs "$debs" \
    --version "$version" --revision "$revision" --source "$source_url" >"$r/usr/share/doc/kubeboot/sbom.spdx.json"
  chmod 0644 "$r/usr/share/doc/kubeboot/sbom.spdx.json"
}
runtime "$work/runtime-amd64" amd64 x86_64-linux-gnu "$x64_bin" strip
runtime "$work/runtime-arm64" arm64 aarch64-linux-gnu "$arm64_bin" aarch64-linux-gnu-strip

staging=$out/.building
rm -rf "$staging"; mkdir -p "$staging"
node packaging/image/oci.mjs --work "$work" --out "$staging" --version "$version" --revision "$revision" \
  --source "$source_url" --gzip-level "$gzip_level" --archive "$archive"
for a in amd64 arm64; do cp "$work/runtime-$a/usr/share/doc/kubeboot/sbom.spdx.json" "$staging/kubeboot-$version-$a.spdx.json"; done
rm -rf "$out/oci"
for f in oci "$archive" digest kubeboot-"$version"-amd64.spdx.json kubeboot-"$version"-arm64.spdx.json; do mv -f "$staging/$f" "$out/$f"; done
rm -rf "$staging"
echo "$inputs" >"$out/.inputs"
echo "built: $out/$archive ($(du -h "$out/$archive" | cut -f1)) $(cat "$out/digest")"
