#!/bin/bash
# bench/faults-issue17.sh BIN [WORK] - injects each fault of issue 17 (items 3, 5, 6, 7)
# into runs of BIN/gnnlaunch and BIN/gnnprep on a small synthetic dataset, and prints
# each command with its exit status and the line that tells what happened.
# Recorded in bench/results/faults-2026-11-25.md. Generated data goes to WORK
# (default /tmp/sluice-faults-<pid>); nothing is left in /dev/shm.
B=$(realpath "$1"); G=$B/gnnlaunch; W=${2:-/tmp/sluice-faults-$$}; rm -rf $W; mkdir -p $W; cd $W
# XXH3 of a file, for rewriting labels.bin with a matching checksum
printf '#include <xxhash.h>\n#include <stdio.h>\n#include <stdlib.h>\nint main(int c,char**v){FILE*f=fopen(v[1],"rb");fseek(f,0,2);long n=ftell(f);rewind(f);char*b=malloc(n);if(fread(b,1,n,f)!=(size_t)n)return 1;printf("%%016llx\\n",(unsigned long long)XXH3_64bits(b,n));return 0;}\n' > xh.c
cc -O1 -o xh xh.c -lxxhash
export XDG_RUNTIME_DIR=$W/xdg; mkdir -m700 -p $XDG_RUNTIME_DIR
$B/gnnprep synth ds --nodes 4000 --avg-degree 8 --feat-dim 16 --classes 4 --train-frac 0.4 --val-frac 0.2 --test-frac 0.2 --seed 11 >/dev/null 2>&1
cfg() { printf '[dataset]\npath = "%s"\n[model]\nkind = "sage"\nhidden = %s\nfanouts = [8, 4]\n[train]\nbatch_size = 64\nepochs = 2\nlr = 0.01\nseed = 5\ncheckpoint_dir = "%s/ck"\n[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 8\nstaging_mb = 4\nio_depth = 16\nordered = true\n' "$1" "$2" "$W" ; }
cfg $W/ds 32 > run.toml; cfg $W/ds 64 > h64.toml
show() { echo "\$ $1"; echo "  rc=$2  $3"; }
N=$(od -An -tu4 -N4 ds/train.bin | tr -d ' ')
o=$(SLUICE_FAULT_NAN_NODE=$N timeout 60 $G --cpu run.toml 2>&1); show "SLUICE_FAULT_NAN_NODE=$N gnnlaunch --cpu run.toml" $? "$(echo "$o" | grep -E 'loss is nan|^test_acc' | head -1 | cut -c1-230)"
cp -r ds ds-nl; python3 - <<'P'
import struct,re,subprocess
ids=open('ds-nl/val.bin','rb').read(); lab=bytearray(open('ds-nl/labels.bin','rb').read())
for (i,) in struct.iter_unpack('<I',ids): lab[4*i:4*i+4]=struct.pack('<i',-1)
open('ds-nl/labels.bin','wb').write(lab); t=open('ds-nl/dataset.toml').read()
open('ds-nl/labels.bin','wb').write(lab); h=subprocess.check_output(['./xh','ds-nl/labels.bin']).decode().strip(); t=re.sub(r'(\[labels\](?:(?!\n\[).)*?xxh3 = ")[0-9a-f]+',lambda m:m.group(1)+h,t,flags=re.S); open('ds-nl/dataset.toml','w').write(t)
P
cfg $W/ds-nl 32 > nl.toml; rm -rf ck
o=$(timeout 60 $G --cpu nl.toml 2>&1); show "gnnlaunch --cpu nl.toml   # val split without a label" $? "$(echo "$o" | grep -E 'none of its|^test_acc' | head -1 | cut -c1-230)"
rm -rf ck; ($G --cpu run.toml --epochs 400 --set pipeline.stall_timeout_s=2 > stall.log 2>&1; echo $? > stall.rc) & sleep 1.5; P=$(pgrep -f "gnn-trainer.*$W" | head -1); kill -STOP $P; for i in $(seq 1 15); do [ -f stall.rc ] && break; sleep 1; done
if [ -f stall.rc ]; then show "kill -STOP <gnn-trainer> (stall_timeout_s = 2)" $(cat stall.rc) "$(grep stalled stall.log | cut -c1-230)"; else show "kill -STOP <gnn-trainer> (stall_timeout_s = 2)" hang "still running after 15 s: killed"; kill -CONT $P; sleep 1; fi
rm -rf ck; $G --cpu run.toml >/dev/null 2>&1; o=$(timeout 60 $G --cpu h64.toml --resume --epochs 4 2>&1); show "gnnlaunch --cpu h64.toml --resume --epochs 4   # ck holds a hidden=32 run" $? "$(echo "$o" | grep -E 'another run|resuming|holds a model' | head -1 | cut -c1-230)"
($G --cpu run.toml --epochs 300 > a.log 2>&1 &) ; sleep 0.3; o=$(timeout 60 $G --cpu run.toml --epochs 1 2>&1); show "two runs of run.toml at once" $? "$(echo "$o" | grep -E 'in use|^test_acc' | head -1 | cut -c1-230)"; sleep 3
rm -rf ck; $G --cpu run.toml --epochs 3 >/dev/null 2>&1; $G --cpu run.toml --epochs 1 >/dev/null 2>&1; show "3-epoch run, then a 1-epoch run in the same dir: ls ck" - "$(ls ck | tr '\n' ' ')"
o=$(timeout 60 $G --cpu run.toml --metrics /dev/full 2>&1); show "gnnlaunch --cpu run.toml --metrics /dev/full" $? "$(echo "$o" | grep -E 'metrics' | head -1 | cut -c1-200)"
o=$(timeout 60 $G --cpu run.toml --metrics /dev/full --strict-outputs 2>&1); show "... --metrics /dev/full --strict-outputs" $? "$(echo "$o" | grep -E 'strict|unknown option' | head -1 | cut -c1-200)"
mkfifo fifo.toml; o=$(timeout 5 $G --cpu fifo.toml 2>&1); show "gnnlaunch --cpu fifo.toml   # a FIFO" $? "$(echo "$o" | tail -1 | cut -c1-200)"
printf '\xef\xbb\xbf' > bom.toml; cat run.toml >> bom.toml; o=$(timeout 60 $G --cpu bom.toml 2>&1); show "gnnlaunch --cpu bom.toml   # UTF-8 BOM" $? "$(echo "$o" | grep -E '^test_acc|bom.toml' | head -1 | cut -c1-200)"
o=$(timeout 60 $G --cpu run.toml --set train.seed=99999999999999999999 2>&1); show "--set train.seed=99999999999999999999" $? "$(echo "$o" | tail -1 | cut -c1-200)"
sed -i 's/^classes = 4/classes = 4\nclases = 8/' ds/dataset.toml; o=$(timeout 60 $G --cpu run.toml 2>&1); show "dataset.toml with 'clases = 8'" $? "$(echo "$o" | grep -E 'unknown key|^test_acc' | head -1 | cut -c1-200)"; sed -i '/^clases = 8/d' ds/dataset.toml
mkdir .old.partial-999999999; $B/gnnprep synth ds2 --nodes 100 --avg-degree 4 --feat-dim 4 --classes 2 >/dev/null 2>&1; show "gnnprep synth beside a .old.partial-999999999 (dead pid)" - "$(ls -a | grep -c 'partial-999999999') left"
mkdir -p tmpd home; ln -s /nonexistent tmpd/sluice-$(id -u); o=$(env -u XDG_RUNTIME_DIR TMPDIR=$W/tmpd HOME=$W/home timeout 60 $G --cpu run.toml 2>&1); show "TMPDIR/sluice-UID taken by another user, no XDG_RUNTIME_DIR" $? "$(echo "$o" | grep -E 'not a private|^test_acc' | head -1 | cut -c1-230)"
