#!/usr/bin/env bash
# Builds the kit's busybox, as upstream's images hold it: busybox of the
# version of registry.k8s.io/e2e-test-images/busybox (1.37.0), its
# upstream source (Debian's orig tarball, which is busybox's release
# unchanged) with upstream's default applet set (make defconfig), linked
# statically against musl, whose resolver needs no NSS module (a static
# glibc busybox cannot resolve a name).
#
#   hack/busybox/build.sh OUT
#
# The source comes from the Debian archive this machine's apt uses, through
# a private apt state under a temporary directory: the machine's own apt
# configuration is read, never changed. It needs apt-get, musl-tools,
# bzip2 and linux-libc-dev (hack/prereqs.sh checks and installs them).
set -euo pipefail

out=${1:?usage: hack/busybox/build.sh OUT}
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")

# The release and its tarball's digest: Debian's orig tarball of busybox
# 1.37.0 is busybox.net's busybox-1.37.0.tar.bz2, byte for byte.
version=1.37.0
sha256=3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4
# The Debian release whose archive has that source.
suite=trixie

log() { printf 'busybox: %s\n' "$*" >&2; }

for c in apt-get musl-gcc bzip2 make; do
  command -v "$c" >/dev/null || { log "needs $c: run hack/prereqs.sh (as root it installs what is missing)"; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The machine's Debian archive and keyring, from its apt sources (deb822
# .sources files, or one-line sources.list entries): the first archive
# that is not the security one.
archive="" keyring=/usr/share/keyrings/debian-archive-keyring.gpg
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  archive=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' "$f")
  [ -n "$archive" ] && break
done
if [ -z "$archive" ]; then
  archive=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($i !~ /security/) { print $i; exit } } }')
fi
if [ -z "$archive" ]; then
  log "found no Debian archive in /etc/apt/sources.list{,.d}: the kit fetches busybox's source from the one apt uses"
  exit 1
fi

apt_opts=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts="$work/none"
  -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o APT::Sandbox::User=root)
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/none" "$work/src"
echo "deb-src [signed-by=$keyring] $archive $suite main" >"$work/sources.list"
log "fetching the source of busybox $version (Debian $suite)"
apt-get "${apt_opts[@]}" -qq update >/dev/null
(cd "$work/src" && apt-get "${apt_opts[@]}" -qq --download-only source "busybox/$suite" >/dev/null 2>&1) || {
  log "apt-get source busybox/$suite failed"
  exit 1
}
tarball="$work/src/busybox_$version.orig.tar.bz2"
if [ ! -f "$tarball" ]; then
  log "Debian $suite's busybox is not $version any more: found $(ls "$work/src")"
  exit 1
fi
echo "$sha256  $tarball" | sha256sum -c --quiet - || { log "the tarball's digest is not busybox $version's"; exit 1; }
tar -xjf "$tarball" -C "$work"
src="$work/busybox-$version"

# musl's headers, and this machine's Linux headers beside them (musl-gcc
# sees its own headers alone).
mkdir -p "$work/include"
for d in linux asm-generic mtd; do ln -s "/usr/include/$d" "$work/include/$d"; done
ln -s "/usr/include/$(gcc -dumpmachine)/asm" "$work/include/asm"

cd "$src"
# The build's time stamp (busybox prints it): the release's day, so that
# the same source gives the same binary, and the kit's images the same
# digests.
export SOURCE_DATE_EPOCH=1727308800 KCONFIG_NOTIMESTAMP=1
log "building with musl, statically (make defconfig)"
make -s defconfig >/dev/null
# Upstream's applets as defconfig has them; static, with musl; the SHA
# instructions left to run time (defconfig assumes an assembler that knows
# them).
sed -i \
  -e 's/^# CONFIG_STATIC is not set/CONFIG_STATIC=y/' \
  -e "s|^CONFIG_EXTRA_CFLAGS=.*|CONFIG_EXTRA_CFLAGS=\"-isystem $work/include\"|" \
  -e 's/^CONFIG_SHA1_HWACCEL=y/# CONFIG_SHA1_HWACCEL is not set/' \
  -e 's/^CONFIG_SHA256_HWACCEL=y/# CONFIG_SHA256_HWACCEL is not set/' \
  .config
make -s oldconfig </dev/null >/dev/null
make -s -j"$(nproc)" CC=musl-gcc busybox >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; exit 1; }
./busybox --help >/dev/null 2>&1 || true
file_type=$(LC_ALL=C od -An -c -N4 busybox | tr -d ' ')
[ "$file_type" = "177ELF" ] || { log "the build made no ELF binary"; exit 1; }
if ldd ./busybox >/dev/null 2>&1; then
  log "the build is not static"
  exit 1
fi
install -m 0755 busybox "$out"
log "built $out ($("$out" --list | wc -l) applets)"
