#!/usr/bin/env bash
# The machine's prerequisites, checked before anything is built: the one
# list that `make demo`, `make dev`, `make test` and `.ci/run` share.
#
#   hack/prereqs.sh           check; as root with apt, install what is missing
#   hack/prereqs.sh --check   check only, install nothing
#
# It takes a second or two when nothing is missing. Exit status:
#   0  everything, real nodes included, is here
#   1  the build itself cannot run (no Go, no C compiler, no make, no git,
#      and apt could not install them): one line says what is missing and
#      the command that installs it
#   2  the build can run, real nodes cannot (not root, no cgroups, a Debian
#      package missing that could not be installed): one line says what is
#      missing and the command that installs it; the caller falls back to
#      simulated nodes (make demo, make dev), skips the real-node tests
#      (make test), or fails at once (make test with CI=true)
set -uo pipefail

install=1
case "${1:-}" in
  --check) install=0 ;;
  "") ;;
  *) echo "usage: hack/prereqs.sh [--check]" >&2; exit 64 ;;
esac

say() { printf 'prereqs: %s\n' "$*" >&2; }

# What a real kit node needs of this machine (make node; pkg/testing's
# Options.HostKubelets), as "Debian package:check". A check is a command
# on PATH, a file (a leading /), or pkg-config:MODULE.
#  - runc builds against libseccomp;
#  - the kit's busybox is built from Debian's source of busybox with musl,
#    statically (hack/busybox/build.sh), as upstream's image is;
#  - kube-proxy and kube-router run iptables, ipset and conntrack; a node
#    is made with ip, nsenter, unshare and mount;
#  - the agnhost image holds, as upstream's does, curl, dig, nslookup,
#    nc (OpenBSD's), socat, getent, bash, ip and ss of this machine.
real_node_packages=(
  "pkg-config:pkg-config"
  "libseccomp-dev:pkg-config:libseccomp"
  "musl-tools:musl-gcc"
  "bzip2:bzip2"
  "linux-libc-dev:/usr/include/linux/version.h"
  "iptables:iptables"
  "ipset:ipset"
  "conntrack:conntrack"
  "iproute2:ip"
  "iproute2:ss"
  "util-linux:nsenter"
  "util-linux:unshare"
  "mount:mount"
  "curl:/usr/bin/curl"
  "bind9-dnsutils:/usr/bin/dig"
  "bind9-dnsutils:/usr/bin/nslookup"
  "netcat-openbsd:/bin/nc.openbsd"
  "socat:/usr/bin/socat"
  "dash:/bin/dash"
  "bash:/bin/bash"
  "libc-bin:/usr/bin/getent"
)

# present CHECK says whether a check holds.
present() {
  case "$1" in
    /*) [ -e "$1" ] ;;
    pkg-config:*) command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "${1#pkg-config:}" ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

# missing_packages prints the Debian packages of the given entries whose
# check fails, once each.
missing_packages() {
  local e pkg check seen=" "
  for e in "$@"; do
    pkg=${e%%:*} check=${e#*:}
    if ! present "$check" && [[ "$seen" != *" $pkg "* ]]; then
      seen+="$pkg "
      printf '%s\n' "$pkg"
    fi
  done
}

root=0
[ "$(id -u)" -eq 0 ] && root=1
apt=0
command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1 && apt=1

# apt_install installs Debian packages, saying which; as root only. Its
# output is shown only if it fails.
apt_install() {
  say "installing $* (apt-get, once: this machine lacks them)"
  local log
  log=$(mktemp)
  # A stale package list gives 404s: refresh it first.
  if DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1; then
    rm -f "$log"
    return 0
  fi
  cat "$log" >&2
  rm -f "$log"
  return 1
}

# ensure_packages sets pkgs to the Debian packages of the given entries
# that are missing, after installing them where it may (root, apt, no
# --check).
ensure_packages() {
  mapfile -t pkgs < <(missing_packages "$@")
  if [ ${#pkgs[@]} -gt 0 ] && [ $install -eq 1 ] && [ $root -eq 1 ] && [ $apt -eq 1 ]; then
    apt_install "${pkgs[@]}" || say "could not install ${pkgs[*]}"
    mapfile -t pkgs < <(missing_packages "$@")
  fi
}

# The build: Go, make, a C compiler (cgo, the race detector) and git.
# Debian's Go may be older than go.mod asks: Go 1.21 and later fetch the
# toolchain go.mod names by themselves; .ci/run hands an older one over.
build_packages=(
  "golang-go:go"
  "ca-certificates:/etc/ssl/certs/ca-certificates.crt"
  "make:make"
  "gcc:${CC:-gcc}"
  "libc6-dev:/usr/include/stdio.h"
  "git:git"
)
ensure_packages "${build_packages[@]}"
if [ ${#pkgs[@]} -gt 0 ]; then
  if [ $apt -eq 1 ]; then
    say "cannot build: missing Debian packages ${pkgs[*]}. Fix: sudo apt-get install -y ${pkgs[*]} (or Go from https://go.dev/dl)"
  else
    say "cannot build: missing ${pkgs[*]} (Debian's names: Go, a C compiler and its C library headers, make, git)"
  fi
  exit 1
fi

# Real nodes: root, cgroups, this machine's packages.
why=()
[ $root -eq 1 ] || why+=("root (a real node makes network namespaces, mounts and cgroups)")
if [ ! -d /sys/fs/cgroup ] || [ -z "$(ls -A /sys/fs/cgroup 2>/dev/null)" ]; then
  why+=("cgroups mounted at /sys/fs/cgroup")
fi
ensure_packages "${real_node_packages[@]}"
if [ ${#pkgs[@]} -gt 0 ]; then
  if [ $apt -eq 1 ]; then
    why+=("Debian packages ${pkgs[*]}")
  else
    why+=("${pkgs[*]} (Debian's package names; this machine has no apt)")
  fi
fi
if [ $apt -eq 0 ]; then
  # The kit fetches busybox's source and nginx with apt.
  why+=("apt-get (the kit fetches Debian's busybox source and nginx)")
fi

if [ ${#why[@]} -eq 0 ]; then
  exit 0
fi
fix=""
if [ ${#pkgs[@]} -gt 0 ] && [ $apt -eq 1 ]; then
  fix="sudo apt-get install -y ${pkgs[*]}"
fi
if [ $root -eq 0 ]; then
  fix="${fix:+$fix, then }run as root (sudo make ...)"
fi
line="no real nodes here: missing $(IFS=';'; echo "${why[*]}" | sed 's/;/; /g')"
[ -n "$fix" ] && line+=". Fix: $fix"
say "$line"
exit 2
