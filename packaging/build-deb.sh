#!/bin/bash
# Build the Debian package of xlurm with cargo-deb (metadata: [package.metadata.deb] in
# Cargo.toml; maintainer scripts: packaging/debian/).
#
#   packaging/build-deb.sh [--no-build] [--deb-version V] [--out DIR] [--fast] [--lint]
#
#   --no-build        package target/release as it is (default: cargo build --release --locked)
#   --deb-version V   the package version (default: Cargo.toml's version, revision 1: 0.1.0-1)
#   --out DIR         where the .deb goes (default: target/debian); its path is printed last
#   --fast            faster, weaker compression (test builds)
#   --lint            run lintian on it (installed with apt-get when missing and root)
#
# Installs what it needs when missing: cargo-deb (cargo install, pinned, ~2.5 min once),
# and as root dpkg-dev (dpkg-shlibdeps, for the libc dependency) and binutils (strip).
set -euo pipefail

CARGO_DEB_VERSION=3.8.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=1 version="" outdir="" lint=0 fast=0
while [ $# -gt 0 ]; do
    case $1 in
        --no-build) build=0 ;;
        --deb-version) version=${2:?--deb-version needs a value}; shift ;;
        --deb-version=*) version=${1#*=} ;;
        --out) outdir=${2:?--out needs a directory}; shift ;;
        --out=*) outdir=${1#*=} ;;
        --fast) fast=1 ;;
        --lint) lint=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "build-deb.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

say() { printf 'build-deb: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$root/$target ;; esac
outdir=${outdir:-$target/debian}

# --- tools -------------------------------------------------------------------------------
apt_need=()
command -v dpkg-shlibdeps >/dev/null || apt_need+=(dpkg-dev)
command -v strip >/dev/null || apt_need+=(binutils)
[ $lint = 1 ] && ! command -v lintian >/dev/null && apt_need+=(lintian)
if [ ${#apt_need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        die "missing ${apt_need[*]}: install them (apt-get install ${apt_need[*]}) or run as root"
    fi
    say "installing ${apt_need[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${apt_need[@]}" >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${apt_need[@]}" >/dev/null; } \
        || die "apt-get install ${apt_need[*]} failed"
fi

have=$(cargo deb --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1 || true)
if [ "${have%%.*}" != "${CARGO_DEB_VERSION%%.*}" ]; then
    say "installing cargo-deb $CARGO_DEB_VERSION (cargo install --locked; ${have:+replacing $have, }takes a few minutes once)"
    t0=$SECONDS
    cargo install --locked --quiet --version "$CARGO_DEB_VERSION" cargo-deb || die "cargo install cargo-deb failed"
    say "cargo-deb installed in $((SECONDS - t0))s"
fi

# --- build -------------------------------------------------------------------------------
if [ $build = 1 ]; then
    say "cargo build --release --locked --bins"
    cargo build --release --locked --bins
fi
for b in xlurmd xlurm; do
    [ -x "$target/release/$b" ] || die "$target/release/$b is missing (run without --no-build)"
done
# build.rs writes the man pages and completions to <target>/generated; the assets in
# Cargo.toml name them as target/generated (relative to the sources).
gen=$target/generated
if [ ! -f "$gen/man/xlurm.1" ] || [ ! -f "$gen/completions/bash/xlurm" ]; then
    [ $build = 1 ] || die "$gen is incomplete (run without --no-build)"
    say "$gen is incomplete: rerunning build.rs"
    touch build.rs
    cargo build --release --locked --bins
    [ -f "$gen/man/xlurm.1" ] || die "build.rs did not write $gen"
fi
if [ "$(cd "$gen" && pwd -P)" != "$(mkdir -p "$root/target" && cd "$root/target" && pwd -P)/generated" ]; then
    rm -rf "$root/target/generated"
    cp -a "$gen" "$root/target/generated"
fi

# --- package -----------------------------------------------------------------------------
mkdir -p "$outdir"
args=(--no-build --output "$outdir")
[ -n "$version" ] && args+=(--deb-version "$version")
[ $fast = 1 ] && args+=(--fast)
say "cargo deb ${args[*]}"
# (cargo-deb looks for unit files next to the maintainer scripts and warns that there are
# none: the units are assets, listed in Cargo.toml.)
deb=$(cargo deb "${args[@]}" 2> >(grep -v 'No usable systemd units found' >&2) | tail -n 1)
[ -f "$deb" ] || die "cargo deb did not report a package (got: $deb)"

if [ $lint = 1 ]; then
    say "lintian $deb"
    # errors fail the build; warnings are printed
    lintian --fail-on error "$deb" >&2 || die "lintian reports errors"
fi
say "built $deb"
echo "$deb"
