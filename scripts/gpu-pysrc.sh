#!/usr/bin/env bash
# Downloads the source archives of the two PyTorch extensions that PyTorch
# Geometric's NeighborLoader needs and a GPU machine's image may lack
# (torch-scatter, torch-sparse: PyG samples with pyg-lib or torch-sparse,
# and neither publishes wheels on PyPI for every torch), for
# scripts/gpu-pyg.sh to build there against the machine's own torch. Run
# it where PyPI is reachable; the GPU machine needs no registry.
#
#   scripts/gpu-pysrc.sh [DIR]    # default: .pysrc (ignored by git); its archives are replaced
set -euo pipefail
dir=${1:-.pysrc}
case "$dir" in -h | --help)
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
esac
command -v python3 >/dev/null || { echo "gpu-pysrc: needs python3 with pip" >&2; exit 2; }
mkdir -p "$dir"
rm -f "$dir"/torch_scatter-*.tar.gz "$dir"/torch_sparse-*.tar.gz
# the last releases with source archives on PyPI, fetched by the index's
# JSON (pip download would build their metadata, which imports torch)
python3 - "$dir" <<'PY'
import hashlib, json, sys, urllib.request
out = sys.argv[1]
for name, ver in (("torch-scatter", "2.1.2"), ("torch-sparse", "0.6.18")):
    with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=60) as r:
        meta = json.load(r)
    sd = [u for u in meta["releases"].get(ver, []) if u["packagetype"] == "sdist"]
    if not sd:
        sys.exit(f"gpu-pysrc: {name} {ver} has no source archive on PyPI")
    u = sd[0]
    with urllib.request.urlopen(u["url"], timeout=120) as r:
        data = r.read()
    if hashlib.sha256(data).hexdigest() != u["digests"]["sha256"]:
        sys.exit(f"gpu-pysrc: {u['filename']}: sha256 differs from the index's")
    with open(f"{out}/{u['filename']}", "wb") as f:
        f.write(data)
PY
ls -l "$dir"
echo "gpu-pysrc: carry $dir to the GPU machine and run scripts/gpu-pyg.sh $dir PREFIX there"
