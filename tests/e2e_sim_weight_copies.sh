#!/bin/sh
# e2e_sim_weight_copies.sh - the 16-bit weight copies made once per step
# (backend/weight_copies.h) through the binary, on simulated GPUs in bf16
# (TAP): every trainer that writes the master weights from another place
# (the optimizer on each of 2 towers, a parameter server's copy on the
# host or on the devices, async's uploads) and a resume from a checkpoint
# (restore writes the weights) ends with the same bits as the same run
# with TT_WEIGHT_COPIES=each_call, which converts the weights at every call
# as before the copies: the saved model and every epoch's loss, byte for
# byte. A copy kept past a write of the weights would read old weights and
# change them (tests/test_weight_copies.c shows the logits move with every
# update). Deterministic runs: no statistical margin.
. "$(dirname "$0")/tt_lib.sh"

cat >"$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/lenet.cfg";
dataflow = { source = { type = "fake"; shape = [1, 28, 28]; classes = 10; size = 256; };
             batch_size = 32; };
optimizer = { type = "momentum"; learning_rate = 0.05; momentum = 0.9; };
trainer = { type = "simple"; device = "sim"; precision = "bf16"; };
max_epoch = 2;
callbacks = ( { type = "model_saver"; max_to_keep = 0; } );
monitors = ( "json" );
CFG

# one run per mode; its saved model and losses in $T/<name>.<mode>
train() { # name trainer-settings
  for mode in step each_call; do
    TT_WEIGHT_COPIES=$mode "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/$1.$mode" --quiet \
      --set "trainer=$2" >"$T/$1.$mode.out" 2>&1 || return 1
  done
}

# two safetensors files hold the same tensors, byte for byte (their headers
# name their own log directories)
same_data() {
  $PY - "$1" "$2" <<'PYEOF'
import json, struct, sys
def data(p):
    d = open(p, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    h.pop("__metadata__", None)
    return h, d[8 + n:]
assert data(sys.argv[1]) == data(sys.argv[2])
PYEOF
}

same_bits() { # name
  a=$(ls "$T/$1.step"/model-*.safetensors 2>/dev/null | tail -n 1)
  b="$T/$1.each_call/$(basename "$a")"
  [ -n "$a" ] && same_data "$a" "$b" &&
    $PY -c 'import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); assert [e["train_loss"] for e in a]==[e["train_loss"] for e in b] and len(a)==2' \
      "$T/$1.step/stats.json" "$T/$1.each_call/stats.json"
}

for t in "simple:towers = [0];" "sync_replicated:towers = [0, 1];" \
         "sync_parameter_server:towers = [0, 1]; ps_device = \"cpu\";" \
         "sync_parameter_server:towers = [0, 1]; ps_device = \"gpu\";" "async:towers = [0];"; do
  type=${t%%:*}
  name=$(echo "$t" | tr -dc 'a-z_01')
  train "$name" "{ type = \"$type\"; device = \"sim\"; precision = \"bf16\"; ${t#*:} }"
  rc=$?
  [ $rc = 0 ] && same_bits "$name"
  ok $? "$type (${t#*:}) on sim bf16: weight copies once per step give the bits of conversions at every call (model and losses)"
  [ $rc = 0 ] || tail -n 3 "$T/$name.step.out" "$T/$name.each_call.out" | sed 's/^/# /'
done

# a resume restores the weights from the checkpoint of epoch 1
rc=0
for mode in step each_call; do
  TT_WEIGHT_COPIES=$mode "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/resume.$mode" --quiet \
    --set max_epoch=1 >"$T/r1.$mode.out" 2>&1 &&
    TT_WEIGHT_COPIES=$mode "$TOWERTRAIN" resume "$T/resume.$mode" --quiet --max-epoch 2 \
      >"$T/r2.$mode.out" 2>&1 || rc=1
done
[ $rc = 0 ] && a=$(ls "$T/resume.step"/model-*.safetensors | tail -n 1) &&
  same_data "$a" "$T/resume.each_call/$(basename "$a")" &&
  same_data "$a" "$T/simpletowers0.step/$(basename "$a")"
ok $? "a resume on sim bf16 (the checkpoint's weights uploaded): the bits of each_call, and of the run without the stop"

TT_WEIGHT_COPIES=sometimes "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/bad" --quiet >"$T/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q 'TT_WEIGHT_COPIES="sometimes"' "$T/bad.out" && [ "$(wc -l <"$T/bad.out")" -le 2 ]
ok $? "TT_WEIGHT_COPIES=sometimes: refused with exit status 2 and one line (status $rc: $(head -n 1 "$T/bad.out"))"
tt_done
