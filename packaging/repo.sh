#!/usr/bin/env bash
# Builds dist/repo/ from dist/packages/ (npm run package): a signed apt
# repository and a signed yum/dnf repository an operator can serve from any
# static web server.
#
#   dist/repo/apt/pool/main/*.deb
#   dist/repo/apt/dists/<suite>/{Release,InRelease,Release.gpg}
#   dist/repo/apt/dists/<suite>/main/binary-{amd64,arm64}/Packages{,.gz}
#   dist/repo/rpm/*.rpm (each signed), repodata/ (repomd.xml.asc signed)
#   dist/repo/kubeboot-repo.asc (the public key; give it to kubeboot user-data --repo-key)
#
# Usage: packaging/repo.sh --gpg-key KEYID [--suite stable] [--out dist/repo] [--packages dist/packages]
# The key must be in gpg's keyring (GNUPGHOME is honoured) with no passphrase
# prompt (use gpg-agent or a key without passphrase for unattended builds).
# Needs apt-ftparchive (apt-utils), createrepo_c (createrepo-c), rpmsign (rpm), gpg.
set -euo pipefail
umask 022
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
key='' suite=stable out=dist/repo from=dist/packages
while [ $# -gt 0 ]; do
  case "$1" in
    --gpg-key) key=${2:?--gpg-key needs a key id}; shift 2 ;;
    --suite) suite=${2:?--suite needs a name}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --packages) from=${2:?--packages needs a directory}; shift 2 ;;
    *) echo "repo.sh: unknown argument $1 (want --gpg-key KEYID [--suite NAME] [--out DIR] [--packages DIR])" >&2; exit 2 ;;
  esac
done
if [ -z "$key" ]; then echo 'repo.sh: --gpg-key KEYID is required (the signing key, in the gpg keyring)' >&2; exit 2; fi
for tool in apt-ftparchive createrepo_c rpmsign gpg; do
  command -v "$tool" >/dev/null || { echo "repo.sh: $tool is missing (apt-get install apt-utils createrepo-c rpm gnupg)" >&2; exit 2; }
done
gpg --batch --list-secret-keys "$key" >/dev/null 2>&1 || { echo "repo.sh: no secret key $key in the gpg keyring${GNUPGHOME:+ $GNUPGHOME}" >&2; exit 2; }
shopt -s nullglob
debs=("$from"/*.deb)
rpms=("$from"/*.rpm)
if [ ${#debs[@]} -eq 0 ] && [ ${#rpms[@]} -eq 0 ]; then echo 'repo.sh: no packages in $from (run npm run package first)' >&2; exit 2; fi

# Built beside the target and renamed over it: a web server never serves a half-written repository.
tmp="$out.building"
rm -rf "$tmp"
mkdir -p "$tmp/apt/pool/main" "$tmp/rpm"
gpg --batch --armor --export "$key" >"$tmp/kubeboot-repo.asc"

# ---- apt ----
if [ ${#debs[@]} -gt 0 ]; then
  cp "${debs[@]}" "$tmp/apt/pool/main/"
  archs=()
  for deb in "${debs[@]}"; do archs+=("$(dpkg-deb -f "$deb" Architecture)"); done
  mapfile -t archs < <(printf '%s\n' "${archs[@]}" | sort -u)
  (
    cd "$tmp/apt"
    for arch in "${archs[@]}"; do
      dir="dists/$suite/main/binary-$arch"
      mkdir -p "$dir"
      apt-ftparchive --arch "$arch" packages pool/main >"$dir/Packages"
      gzip -9n <"$dir/Packages" >"$dir/Packages.gz"
    done
    apt-ftparchive \
      -o "APT::FTPArchive::Release::Origin=kubeboot" \
      -o "APT::FTPArchive::Release::Label=kubeboot" \
      -o "APT::FTPArchive::Release::Suite=$suite" \
      -o "APT::FTPArchive::Release::Codename=$suite" \
      -o "APT::FTPArchive::Release::Architectures=${archs[*]}" \
      -o "APT::FTPArchive::Release::Components=main" \
      release "dists/$suite" >Release.tmp
    mv Release.tmp "dists/$suite/Release"
    gpg --batch --yes --local-user "$key" --clearsign -o "dists/$suite/InRelease" "dists/$suite/Release"
    gpg --batch --yes --local-user "$key" --armor --detach-sign -o "dists/$suite/Release.gpg" "dists/$suite/Release"
  )
fi

# ---- rpm ----
if [ ${#rpms[@]} -gt 0 ]; then
  cp "${rpms[@]}" "$tmp/rpm/"
  # Debian's rpm looks for gpg2; name the gpg that signed everything else.
  rpmsign --addsign --define "_gpg_name $key" --define "__gpg $(command -v gpg)" "$tmp"/rpm/*.rpm >/dev/null
  createrepo_c --quiet "$tmp/rpm"
  gpg --batch --yes --local-user "$key" --armor --detach-sign -o "$tmp/rpm/repodata/repomd.xml.asc" "$tmp/rpm/repodata/repomd.xml"
fi

rm -rf "$out.old"
[ -e "$out" ] && mv "$out" "$out.old"
mv "$tmp" "$out"
rm -rf "$out.old"
echo "$out"
