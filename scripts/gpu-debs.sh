#!/usr/bin/env bash
# Downloads the Debian packages that a bare GPU machine lacks to build and
# test Sluice, for scripts/gpu-check.sh --debs DIR (docs/gpu.md). Run it
# on a Debian 12 machine with apt (root or not: apt-get download needs no
# privileges); the machine that uses the files needs no package registry.
#
#   scripts/gpu-debs.sh [DIR]     # default: .debs (ignored by git); its .deb files are replaced
#
# What it fetches: the -dev packages of every library CMakeLists.txt asks
# for (sluice_dep lines; scripts/install-deps.sh installs the same), plus
# pkg-config, plus every package their libraries need at run time. It
# leaves out what any Debian or Ubuntu image with a C compiler already
# has (libc, the compiler's runtimes, zlib, ...: BASE below), and the
# -dev packages that other -dev packages pull in only for static linking
# (gpu-check.sh drops the pkg-config lines that would ask for them).
set -euo pipefail

dir=${1:-.debs}
case "$dir" in -h | --help)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
esac
if ! command -v apt-get >/dev/null || ! command -v apt-cache >/dev/null; then
    echo "gpu-debs: needs apt-get and apt-cache (a Debian or Ubuntu machine)" >&2
    exit 2
fi

TOP=(pkg-config zlib1g-dev libxxhash-dev libarchive-dev liburing-dev libzmq3-dev libjansson-dev
     libopenblas-dev libopenblas-pthread-dev libcmocka-dev libprotobuf-c-dev protobuf-c-compiler libisal-dev)
BASE='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libgcc-s1|libstdc\+\+6|gcc-[0-9]+-base|libgomp1|libquadmath0|libnsl2|libnsl-dev|libtirpc3|libtirpc-dev|libtirpc-common|rpcsvc-proto|zlib1g|libzstd1|liblzma5|libbz2-1\.0|libacl1|libattr1|libmd0|libselinux1|libpcre2-8-0)$'

# The first alternative of every Depends/Pre-Depends of package $1.
deps_of() {
    apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$1" |
        awk '/^ *\|?(Pre)?Depends:/ { alt = ($1 ~ /^\|/); if (!prev) print $2; prev = alt }' | grep -v '^<' || true
}

declare -A seen=()
queue=("${TOP[@]}")
for p in "${TOP[@]}"; do seen[$p]=1; done
want=()
while ((${#queue[@]})); do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    apt-cache show --no-all-versions "$p" >/dev/null 2>&1 ||
        { echo "gpu-debs: no package $p in this machine's apt lists (run apt-get update)" >&2; exit 1; }
    want+=("$p")
    for d in $(deps_of "$p"); do
        d=${d%%:*}
        [[ -n ${seen[$d]:-} ]] && continue
        seen[$d]=1
        [[ $d =~ $BASE ]] && continue
        [[ $d == *-dev && " ${TOP[*]} " != *" $d "* ]] && continue # static-only
        queue+=("$d")
    done
done

mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
echo "gpu-debs: downloading ${#want[@]} packages into $PWD: ${want[*]}" >&2
apt-get download -q "${want[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true
missing=()
for p in "${want[@]}"; do
    compgen -G "${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "gpu-debs: could not download: ${missing[*]}" >&2
    exit 1
fi
echo "gpu-debs: $(ls ./*.deb | wc -l) files, $(du -sh . | cut -f1) in $PWD; carry this folder to the GPU machine" \
    "and run scripts/gpu-check.sh --debs $dir" >&2
