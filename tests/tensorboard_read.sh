#!/usr/bin/env bash
# tests/tensorboard_read.sh BUILD_DIR - gnnlaunch --tensorboard read back by
# TensorBoard itself: a small run writes --tensorboard and --metrics-csv;
# TensorBoard's EventAccumulator must find every epoch's scalars, equal (as
# float32) to the CSV's. Needs a Python with the tensorboard package:
# $SLUICE_TB_PYTHON, else python3; exits 77 (skipped) without one.
set -euo pipefail
build=$(cd "${1:?BUILD_DIR}" && pwd)
py=${SLUICE_TB_PYTHON:-python3}
if ! "$py" -c 'import tensorboard.backend.event_processing.event_accumulator' >/dev/null 2>&1; then
    echo "tensorboard_read: $py has no tensorboard package; skipped (set SLUICE_TB_PYTHON)"
    exit 77
fi
work=$build/tmp/tensorboard-read
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$build/bin/gnnprep" synth ds --nodes 2000 --avg-degree 6 --feat-dim 8 --classes 3 --seed 2 >/dev/null
printf '[dataset]\npath = "ds"\n[model]\nhidden = 8\nfanouts = [5, 5]\n[train]\nbatch_size = 100\nepochs = 4\n[pipeline]\nfeature_buffer_mb = 8\nstaging_mb = 4\n' > run.toml
"$build/bin/gnnlaunch" --cpu run.toml --tensorboard tb --metrics-csv m.csv >run.log 2>&1
"$py" - <<'PY'
import csv, math, struct
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
rows = list(csv.DictReader(open("m.csv")))
assert len(rows) == 4, rows
ea = EventAccumulator("tb")
ea.Reload()
def f32(x):
    return struct.unpack("f", struct.pack("f", float(x)))[0]
for tag, col in [("train/loss", "loss"), ("train/acc", "train_acc"), ("val/acc", "val_acc"), ("val/loss", "val_loss"),
                 ("train/lr", "lr"), ("time/epoch_s", "seconds"), ("io/hit_rate", "hit_rate")]:
    got = {e.step: e.value for e in ea.Scalars(tag)}
    want = {int(r["epoch"]): f32(r[col]) for r in rows if r[col] != ""}
    assert set(got) == set(want), (tag, got, want)
    for k in want:  # the CSV has 6 significant digits
        assert math.isclose(got[k], want[k], rel_tol=1e-5), (tag, k, got[k], want[k])
test = ea.Scalars("test/acc")
assert [e.step for e in test] == [4], test
print("tensorboard_read: TensorBoard reads", len(ea.Tags()["scalars"]), "scalar tags over 4 epochs, equal to the CSV")
PY
