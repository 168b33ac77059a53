#!/bin/sh
# End-to-end: the large-batch recipe (adamw, lars, weight_decay_exclude,
# clip_global_norm, label smoothing, cosine schedules, accumulate) in every
# trainer type against float64 PyTorch (tests/recipe_check.py says how) (TAP;
# skipped visibly without python3-torch).
. "$(dirname "$0")/tt_lib.sh"
if ! $PY -c "import torch, numpy" 2>/dev/null; then
  skip "the recipe against float64 torch" "python3-torch or numpy not installed"
  tt_done
fi
MPIRUN=""
if "$TOWERTRAIN" --version | grep -q mpi && command -v mpirun >/dev/null; then
  MPIRUN="mpirun --allow-run-as-root --oversubscribe"
fi
# whether bf16 runs here follows from the CPU (CPUID) and the build: where it
# does, a refused bf16 run fails instead of skipping
if tt_bf16_here; then TT_BF16_HERE=1; else TT_BF16_HERE=0; fi
export TT_BF16_HERE
$PY "$TT_SRCDIR/tests/recipe_check.py" "$T" "$MPIRUN" >"$T/out" 2>&1
tt_tap "$T/out" $?
tt_done
