# tt_lib.sh - what the end-to-end scripts share. Each sources it first:
#   . "$(dirname "$0")/tt_lib.sh"
# It gives them
#   ok STATUS DESCRIPTION, skip DESCRIPTION REASON, tt_done: TAP lines, the
#       count and the plan (the exit status says whether a check failed);
#       tt_skip_all REASON DESCRIPTION...: SKIPs, then tt_done;
#   tt_tap FILE STATUS: the checks a python script printed (with
#       tests/tt_tap.py's ok and skip), counted in;
#   tt_refused DESCRIPTION TEXT LOGDIR COMMAND...: the check of a command
#       that must be refused as bad input is;
#   tt_same A B TOL [optimizer]: every tensor of two checkpoints within TOL
#       (max |a - b| / max |a| per tensor; TOL 0: bit for bit), the optimizer
#       state too when asked; prints the worst (tests/tt_safetensors.py);
#   tt_job FILE [NAME=VALUE...], tt_lenet_job FILE ...: a job file (below);
#   tt_device: the device of the GPU scripts (tests/gpu/e2e_gpu*.sh), gpu
#       or sim ($TT_DEVICE), and how many there are (below);
#   tt_fm_lenet LOGDIR SEED [ARG...], tt_not_worse DESCRIPTION REF CAND:
#       a statistical comparison of training runs' accuracy (below);
#   tt_grad_runs JOB PREFIX PRECS [ARG...], tt_grad_size PREFIX PREC M0 S SE:
#       a reduced precision's first gradient against fp32's, paired (below);
#   $PY: the python3 to run (numpy, torch): $PYTHON3, which make check sets
#       from configure (it looks in /usr/bin first), else /usr/bin/python3;
#       its scripts can import tests/tt_safetensors.py (PYTHONPATH);
#   $T: a fresh temporary directory, removed when the script exits;
#   tt_cpu_has FEATURE, tt_dnnl_isa [CAP]: what the CPU the tests run on
#       has (CPUID, as tests/tt_cpuid reads it) and the level oneDNN finds on
#       it (below): what a check that depends on the CPU expects;
#   $TT_RUN: the prefix that runs a test program as on the CPU under test
#       ($TT_EMULATOR, below; empty on the machine's own CPU).
# make check exports $TOWERTRAIN (the binary), $TT_SRCDIR and $TT_BUILDDIR
# (the trees); to run a script by hand, set them as it does.

if [ -z "${TOWERTRAIN:-}" ] || [ ! -x "$TOWERTRAIN" ] || [ -z "${TT_SRCDIR:-}" ]; then
  echo "Bail out! set \$TOWERTRAIN (the towertrain binary) and \$TT_SRCDIR (the source tree), as make check does"
  exit 99
fi
# bf16 jobs run bf16's kernels on every CPU that has them, also where
# towertrain would compute them in fp32 because bf16 is slower there (an
# Intel core with AVX512_FP16 and no AMX; towertrain.cfg(5), precision):
# the bf16 checks test bf16's arithmetic on any CPU. e2e_precision.sh checks
# that rule itself, without this.
TT_BF16_KERNELS=1
export TT_BF16_KERNELS
PY=${PYTHON3:-/usr/bin/python3}
PYTHONPATH="$TT_SRCDIR/tests${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
T=$(mktemp -d "${TMPDIR:-/tmp}/tt_e2e.XXXXXX") || exit 99
trap 'rm -rf "$T"' EXIT
n=0
failed=0

# ---- the CPU under test ----
# make check-cpus runs chosen tests as on another CPU: TT_EMULATOR is a
# command that runs an x86-64 program so (QEMU's user mode, "qemu-x86_64
# -cpu EPYC-v1,..." for an AVX2-only AMD EPYC Zen 1; tests/extra_checks.mk).
# Where it is set, $TOWERTRAIN becomes a wrapper that runs towertrain
# through it, and a script runs its own test programs as $TT_RUN PROGRAM, so
# that towertrain, oneDNN and tests/tt_cpuid all see the emulated CPU. The
# python checks run natively: they compute references, on no CPU path of
# ours. A script that another one runs keeps the wrapper it inherited; a
# $TOWERTRAIN that is itself a script (the GPU kit's bin/towertrain) runs
# its program through $TT_EMULATOR itself.
TT_RUN=${TT_EMULATOR:-}
if [ -n "$TT_RUN" ] && [ -z "${TT_EMULATED:-}" ] && [ "$(head -c 4 "$TOWERTRAIN" | tail -c 3)" = ELF ]; then
  mkdir "$T/emulated" &&
    printf '#!/bin/sh\nexec %s "%s" "$@"\n' "$TT_EMULATOR" "$TOWERTRAIN" >"$T/emulated/towertrain" &&
    chmod +x "$T/emulated/towertrain" || exit 99
  TOWERTRAIN=$T/emulated/towertrain TT_EMULATED=1
  export TOWERTRAIN TT_EMULATED
fi

# tt_cpu_has FEATURE: true when the CPU under test has FEATURE, named as
# /proc/cpuinfo names it (avx2, fma, avx512f, avx512_bf16, amx_bf16, ...:
# tests/tt_cpuid.c lists them). Read from CPUID by tests/tt_cpuid, never from
# /proc/cpuinfo, which under QEMU is the host's.
tt_cpu_has() {
  if [ -z "${tt_cpu_features:-}" ]; then
    tt_cpu_features=$($TT_RUN "$TT_BUILDDIR/tests/tt_cpuid") || {
      echo "Bail out! $TT_BUILDDIR/tests/tt_cpuid failed (make check builds it)"; exit 99; }
    tt_cpu_features="$tt_cpu_features "
  fi
  case $tt_cpu_features in *" $1 "*) return 0 ;; esac
  return 1
}

# tt_dnnl_isa [CAP]: the level that oneDNN (2.x, dnnl_get_effective_cpu_isa)
# finds on the CPU under test with ONEDNN_MAX_CPU_ISA=CAP (default: the
# environment's; none: no cap), named as ONEDNN_MAX_CPU_ISA spells it: the
# highest level whose features the CPU has and whose bits (dnnl_types.h's
# dnnl_cpu_isa_t) lie within CAP's. AVX2_VNNI's bits are not within
# AVX512_CORE's: a CPU with AVX-VNNI capped at AVX512_CORE finds AVX2.
tt_dnnl_isa() {
  # towertrain caps oneDNN as TT_CPU_ISA caps its kernels (unless
  # ONEDNN_MAX_CPU_ISA is set): so does the expectation
  case ${TT_CPU_ISA:-} in avx2) td_env=AVX2 ;; plain) td_env=SSE41 ;; *) td_env=ALL ;; esac
  td_cap=${1-${ONEDNN_MAX_CPU_ISA:-$td_env}}
  case ${td_cap:-ALL} in
    ALL) td_max=4095 ;; SSE41) td_max=1 ;; AVX) td_max=3 ;; AVX2) td_max=7 ;;
    AVX2_VNNI) td_max=1031 ;; AVX512_CORE) td_max=39 ;; AVX512_CORE_VNNI) td_max=103 ;;
    AVX512_CORE_BF16) td_max=231 ;; AVX512_CORE_AMX) td_max=999 ;;
    *) echo "Bail out! tt_dnnl_isa: no cap '$td_cap'"; exit 99 ;;
  esac
  td_core=no
  tt_cpu_has avx512f && tt_cpu_has avx512bw && tt_cpu_has avx512vl && tt_cpu_has avx512dq &&
    td_core=yes
  for td_level in AVX512_CORE_AMX:999 AVX512_CORE_BF16:231 AVX512_CORE_VNNI:103 \
                  AVX512_CORE:39 AVX2_VNNI:1031 AVX2:7 AVX:3 SSE41:1; do
    td_bits=${td_level#*:} td_level=${td_level%:*}
    [ $((td_bits & td_max)) = "$td_bits" ] || continue
    case $td_level in
      AVX512_CORE_AMX) [ $td_core = yes ] && tt_cpu_has avx512_vnni && tt_cpu_has avx512_bf16 &&
                         tt_cpu_has amx_tile && tt_cpu_has amx_int8 && tt_cpu_has amx_bf16 ;;
      AVX512_CORE_BF16) [ $td_core = yes ] && tt_cpu_has avx512_vnni && tt_cpu_has avx512_bf16 ;;
      AVX512_CORE_VNNI) [ $td_core = yes ] && tt_cpu_has avx512_vnni ;;
      AVX512_CORE) [ $td_core = yes ] ;;
      AVX2_VNNI) tt_cpu_has avx2 && tt_cpu_has avx_vnni ;;
      AVX2) tt_cpu_has avx2 ;;
      AVX) tt_cpu_has avx ;;
      SSE41) tt_cpu_has sse4_1 ;;
    esac && { echo "$td_level"; return 0; }
  done
  echo "no vector extension"
}

# tt_bf16_here: true when CPU towers can run bf16 here: a build with oneDNN
# on a CPU where oneDNN finds AVX512_CORE_BF16 or AMX (under the
# environment's ONEDNN_MAX_CPU_ISA).
tt_bf16_here() {
  "$TOWERTRAIN" --version | grep -q '^cpu precision: fp32 (bf16 needs oneDNN' && return 1
  case $(tt_dnnl_isa) in AVX512_CORE_BF16|AVX512_CORE_AMX) return 0 ;; esac
  return 1
}

# ok STATUS DESCRIPTION: one TAP line, "ok" when STATUS is 0.
ok() {
  n=$((n + 1))
  if [ "$1" = 0 ]; then
    echo "ok $n - $2"
  else
    echo "not ok $n - $2"
    failed=1
  fi
}

# skip DESCRIPTION REASON: a check that cannot run here, visibly.
skip() {
  n=$((n + 1))
  echo "ok $n - $1 # SKIP $2"
}

# tt_done: the plan, then exit 1 if a check failed, else 0.
tt_done() {
  echo "1..$n"
  exit $failed
}

# tt_skip_all REASON DESCRIPTION...: each check a visible SKIP for REASON,
# then tt_done (the checks a script cannot run here).
tt_skip_all() {
  tt_why=$1
  shift
  for tt_d in "$@"; do skip "$tt_d" "$tt_why"; done
  tt_done
}

# tt_venv_python WHAT DESCRIPTION...: sets vpy to the Python of the
# tests' PyPI environment (tests/tt_venv.sh); where it cannot be made,
# each check a visible SKIP ("no WHAT: why") and tt_done.
tt_venv_python() {
  tt_what=$1
  shift
  if ! vpy=$(sh "$TT_SRCDIR/tests/tt_venv.sh"); then
    tt_skip_all "no $tt_what: $vpy" "$@"
  fi
}

# tt_bn_job FILE OPTIMIZER EPOCHS CALLBACKS: a job of two CPU towers
# (sync_replicated, a thread each) training a convolution, a batchnorm, a
# relu, global average pooling and a dense layer on fake [2, 8, 8] data,
# batch 8, no prefetch workers; OPTIMIZER is the optimizer group's inside,
# EPOCHS max_epoch, CALLBACKS the callbacks list.
tt_bn_job() {
  cat > "$1" <<CFG
dataflow = { source = { type = "fake"; shape = [2, 8, 8]; classes = 4; size = 256; };
             batch_size = 8; prefetch = { workers = 0; }; };
model = { input = [2, 8, 8]; classes = 4; layers = (
  { name = "c0"; type = "conv2d"; filters = 4; kernel = 3; padding = 1; bias = false; },
  { name = "bn0"; type = "batchnorm"; }, { name = "r0"; type = "relu"; },
  { name = "p0"; type = "global_avgpool"; }, { name = "fc"; type = "dense"; units = 4; } ); };
optimizer = { $2 };
trainer = { type = "sync_replicated"; nr_tower = 2; threads_per_tower = 1; };
max_epoch = $3;
callbacks = $4;
CFG
}

# tt_tap FILE STATUS: FILE holds what a python check script printed (stdout
# and stderr), one "ok - WHAT" or "not ok - WHAT" line per check; they are
# numbered on here, other lines pass as diagnostics. STATUS is the script's
# exit status: a script that died fails one more check, so that the checks
# it never reached cannot pass unseen.
tt_tap() {
  while IFS= read -r tt_line; do
    case $tt_line in
      "ok - "*) ok 0 "${tt_line#ok - }" ;;
      "not ok - "*) ok 1 "${tt_line#not ok - }" ;;
      "#"*) echo "$tt_line" ;;
      *) echo "# $tt_line" ;;
    esac
  done <"$1"
  [ "$2" = 0 ] || ok 1 "the python checks ran to their end (exit status $2)"
}

# tt_refused DESCRIPTION TEXT LOGDIR COMMAND...: runs COMMAND, which must be
# refused as bad input is: exit status 2, exactly one line on stderr that
# starts "towertrain: " and holds TEXT (a fixed string; a TEXT that itself
# starts "towertrain: " must start the line), nothing on stdout, and LOGDIR
# not created ("" when there is none to check). One TAP line; what went
# wrong follows it as diagnostics.
tt_refused() {
  tt_desc=$1 tt_text=$2 tt_logdir=$3
  shift 3
  "$@" >"$T/refused.out" 2>"$T/refused.err"
  tt_rc=$?
  tt_why=""
  tt_lines=$(wc -l <"$T/refused.err")
  tt_first=$(head -n 1 "$T/refused.err")
  [ "$tt_rc" -eq 2 ] || tt_why="$tt_why exit status $tt_rc, not 2;"
  [ "$tt_lines" -eq 1 ] || tt_why="$tt_why stderr has $tt_lines lines, not 1;"
  case $tt_first in
    "towertrain: "*) ;;
    *) tt_why="$tt_why stderr does not start with 'towertrain: ';" ;;
  esac
  case $tt_text in
    "towertrain: "*) case $tt_first in "$tt_text"*) ;; *) tt_why="$tt_why stderr does not start with '$tt_text';" ;; esac ;;
    *) case $tt_first in *"$tt_text"*) ;; *) tt_why="$tt_why stderr lacks '$tt_text';" ;; esac ;;
  esac
  [ -s "$T/refused.out" ] && tt_why="$tt_why stdout is not empty;"
  [ -n "$tt_logdir" ] && [ -e "$tt_logdir" ] && tt_why="$tt_why the log directory was created;"
  if [ -z "$tt_why" ]; then
    ok 0 "$tt_desc"
  else
    ok 1 "$tt_desc"
    echo "#$tt_why"
    sed 's/^/# stderr: /' "$T/refused.err" | head -n 5
  fi
}

tt_same() {
  $PY "$TT_SRCDIR/tests/tt_safetensors.py" same "$@"
}

# tt_loss_close REF_STATS GOT_STATS: prints GOT's train loss by epoch; true
# when both runs have 3 epochs, GOT's loss falls from epoch 1 to 3 and each
# epoch's is within 1% of REF's (16-bit training against its fp32 run)
tt_loss_close() {
  $PY -c 'import json, sys
ref = [e["train_loss"] for e in json.load(open(sys.argv[1]))]
got = [e["train_loss"] for e in json.load(open(sys.argv[2]))]
print(" ".join("%.4f" % x for x in got), end="")
sys.exit(0 if len(got) == len(ref) == 3 and got[2] < got[0] and
         all(abs(g - r) <= 0.01 * r for g, r in zip(got, ref)) else 1)' "$1" "$2"
}

# tt_job FILE [NAME=VALUE...]: writes a small job to FILE, each part a
# default that a NAME=VALUE replaces (VALUE is libconfig text):
#   seed=1
#   shape="1, 16, 16" size=512  the fake source's images and count (4 classes)
#   source=...                  another source (then shape is the model's input)
#   batch=8
#   data=                       more dataflow settings ("limit = 64; shuffle = false;")
#   layers=...                  the model's layers: model = { input = [shape];
#                               classes = 4; layers = (layers); } (required
#                               unless model= is given)
#   model=                      the model setting itself ("path" or { ... })
#   lr=0.05                     momentum SGD, momentum 0.9
#   trainer='device = "cpu"; threads_per_tower = 1;'  the trainer group's inside
#   callbacks='( { type = "model_saver"; max_to_keep = 0; } )'
#   epochs=1  steps=8           max_epoch, steps_per_epoch ("" for the dataflow's)
#   monitors=                   e.g. '( "json" )'; none by default
# Change a run of it with --set.
tt_job() {
  tj_file=$1
  shift
  tj_seed=1 tj_shape="1, 16, 16" tj_size=512 tj_source= tj_batch=8 tj_data= tj_layers= tj_model=
  tj_lr=0.05 tj_trainer='device = "cpu"; threads_per_tower = 1;'
  tj_callbacks='( { type = "model_saver"; max_to_keep = 0; } )' tj_epochs=1 tj_steps=8 tj_monitors=
  for tj_a in "$@"; do
    case ${tj_a%%=*} in
      seed|shape|size|source|batch|data|layers|model|lr|trainer|callbacks|epochs|steps|monitors)
        eval "tj_${tj_a%%=*}=\${tj_a#*=}" ;;
      *) echo "Bail out! tt_job: no part '${tj_a%%=*}'"; exit 99 ;;
    esac
  done
  [ -n "$tj_source" ] || tj_source="{ type = \"fake\"; shape = [$tj_shape]; classes = 4; size = $tj_size; }"
  [ -n "$tj_model" ] || tj_model="{ input = [$tj_shape]; classes = 4; layers = ( $tj_layers ); }"
  {
    echo "seed = $tj_seed;"
    echo "dataflow = { source = $tj_source;"
    echo "  batch_size = $tj_batch; $tj_data };"
    echo "model = $tj_model;"
    echo "optimizer = { type = \"momentum\"; learning_rate = $tj_lr; momentum = 0.9; };"
    echo "trainer = { $tj_trainer };"
    echo "callbacks = $tj_callbacks;"
    echo "max_epoch = $tj_epochs;"
    [ -z "$tj_steps" ] || echo "steps_per_epoch = $tj_steps;"
    [ -z "$tj_monitors" ] || echo "monitors = $tj_monitors;"
  } >"$tj_file"
}

# tt_lenet_job FILE SEED LIMIT EPOCHS TEST_LIMIT: a tt_job of LeNet on
# Fashion-MNIST ($TT_FASHION_MNIST, else /usr/share/datasets/fashion-mnist;
# the GPU kit brings its own): normalised images, the first LIMIT training
# images (0: all), batch 64, momentum SGD (lr 0.02), simple on device $DEV
# (tt_device; gpu when unset), EPOCHS epochs, every checkpoint kept,
# validated after each epoch on the first TEST_LIMIT test images (0: all),
# json monitor.
tt_lenet_job() {
  tt_data=${TT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
  tt_norm='augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );'
  tt_job "$1" seed="$2" batch=64 lr=0.02 epochs="$4" steps= monitors='( "json" )' \
    source="{ type = \"idx\"; images = \"$tt_data/train-images-idx3-ubyte.gz\";
             labels = \"$tt_data/train-labels-idx1-ubyte.gz\"; }" \
    data="$tt_norm limit = $3; shuffle = true;" model="\"$TT_SRCDIR/models/lenet.cfg\"" \
    trainer="type = \"simple\"; device = \"${DEV:-gpu}\";" \
    callbacks="( { type = \"model_saver\"; max_to_keep = 0; },
              { type = \"inference_runner\"; dataflow = {
                  source = { type = \"idx\"; images = \"$tt_data/t10k-images-idx3-ubyte.gz\";
                             labels = \"$tt_data/t10k-labels-idx1-ubyte.gz\"; };
                  $tt_norm batch_size = 500; limit = $5; }; } )"
}

# tt_device: the device that the GPU scripts (tests/gpu/e2e_gpu*.sh) run
# on, from $TT_DEVICE: "gpu" (the default: the real GPUs, every check a
# visible SKIP without one) or "sim" (simulated GPUs, towertrain.cfg(5)
# trainer.device: make check runs each script so, tests/e2e_sim_gpu*.sh).
# Sets DEV (trainer.device), DEVNAME (the tower table's name of a device,
# "cuda" or "sim"), ALLREDUCE (the all-reduce the log names, "nccl" or
# "sim") and GPUS: how many devices there are, as the CUDA backend sees them
# (0 without a driver; make check hid them, TT_GPUS gives them back), or for
# sim 64, the ids it accepts (sim has a device for every id a job names).
tt_device() {
  case ${TT_DEVICE:-gpu} in
    gpu)
      DEV=gpu DEVNAME=cuda ALLREDUCE=nccl
      case ${TT_GPUS-all} in
        all) unset CUDA_VISIBLE_DEVICES ;;
        *) CUDA_VISIBLE_DEVICES=$TT_GPUS; export CUDA_VISIBLE_DEVICES ;;
      esac
      GPUS=$("$TOWERTRAIN" bench --device gpu -b 8 -e 8 -n 1 -w 0 2>/dev/null | grep -c '^#  rank') ;;
    sim) DEV=sim DEVNAME=sim ALLREDUCE=sim GPUS=64 ;;
    *) echo "Bail out! TT_DEVICE=$TT_DEVICE: gpu or sim"; exit 99 ;;
  esac
}

# ---- comparing training runs: statistical, 1 false failure in 1,000 ----
# Two runs of a correct program that differ in rounding (bf16 against fp32,
# a GPU against the CPU, another summation order) or in their input path
# (PNG files against the IDX file) end on different models: after a few
# hundred steps the rounding differences have grown into what another seed
# gives. So their accuracies are compared as samples, never as equals.
#
# The job: jobs/fashion_mnist_lenet.cfg as shipped (LeNet, 3 epochs),
# validated on the 10,000 test images. Its final validation accuracy varies
# from run to run with a standard deviation of 0.0043 (16 runs on an AMD EPYC
# Zen 5: seeds 1-8 in fp32, mean 0.8805, and in bf16, mean 0.8799); the test
# set's sampling, sqrt(0.88 x 0.12 / 10000) = 0.0033, is most of it. Equal
# seeds do not pair the runs: bf16 - fp32 at equal seeds spread by 0.0048,
# as two independent runs' sqrt(2) x 0.0034 would.
#
# tt_not_worse takes sigma = 0.0052 (the 80% upper confidence bound of 0.0043
# on 14 degrees of freedom) and fails when the candidate runs' mean accuracy
# is below the reference runs' mean by more than
#     margin = 3.09 x sigma x sqrt(1/k_ref + 1/k_cand)
# (3.09: the one-sided normal quantile of 0.001): 0.0131 for 3 runs each,
# 0.0227 for one each. A correct program fails 1 time in 1,000 at most (1 in
# 10,000 if sigma is the 0.0043 measured); a candidate that loses the margin
# on average fails half the time, one that loses twice the margin 999 times
# in 1,000. Rounding errors too small to move the accuracy are found
# elsewhere: every bf16 conversion of ours truncating instead of rounding
# gave a mean of 0.8798 over seeds 1-6 (bf16 rounding: 0.8799 over 1-8),
# which e2e_precision.sh's paired check of the first step's gradient (its
# size against fp32's, same seed, same batch) and the unit tests (test_bf16,
# test_cpu_ops: against tt_ref.h's rounding, bit for bit) both fail.
TT_FM_SIGMA=0.0052
#
# TT_FM_SIGMA_SHORT: the job shortened to 2 epochs of its first 12,000
# training images (tt_fm_lenet's --set max_epoch=2 --set dataflow.limit=12000,
# 188 steps), a candidate precision against fp32 at the SAME seeds
# (e2e_gpu_precision.sh on sim). So short a run keeps the runs paired:
# measured on sim (AMD EPYC Zen 5, seeds 1-10; each run's sd 0.0144, so
# independent runs would differ by sd 0.0204), bf16 - fp32 and fp16 - fp32
# at equal seeds spread by 0.0099 (18 degrees of freedom, mean -0.0028 and
# -0.0001), 80% upper bound 0.0117. With sigma = 0.0117 / sqrt(2) = 0.0083,
# tt_not_worse's margin 3.09 x sigma x sqrt(2/k) is the paired test's,
# 3.09 x 0.0117 / sqrt(k): 0.036 for one seed, 1 false failure in 1,000 at
# most. Valid only for runs paired so (same job, same seeds).
TT_FM_SIGMA_SHORT=0.0083

# tt_fm_lenet LOGDIR SEED [ARG...]: the shipped job with this seed (and the
# ARGs, --set ...) into LOGDIR, its data from $TT_FASHION_MNIST when set (the
# GPU kit's copy), validated on the test images only; prints its
# final validation accuracy, nothing when the run fails.
tt_fm_lenet() {
  tt_dir=$1 tt_seed=$2
  shift 2
  tt_data=${TT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
  "$TOWERTRAIN" run "$TT_SRCDIR/jobs/fashion_mnist_lenet.cfg" --logdir "$tt_dir" --quiet \
    --set seed=$tt_seed --set 'monitors=( "json" )' \
    --set 'dataflow.source={ type = "idx"; images = "'$tt_data'/train-images-idx3-ubyte.gz";
                             labels = "'$tt_data'/train-labels-idx1-ubyte.gz"; }' \
    --set 'callbacks=( { type = "inference_runner";
      dataflow = { source = { type = "idx"; images = "'$tt_data'/t10k-images-idx3-ubyte.gz";
                              labels = "'$tt_data'/t10k-labels-idx1-ubyte.gz"; };
                   augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
                   batch_size = 500; }; } )' "$@" >"$tt_dir.out" 2>&1 &&
    $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))[-1]["validation_accuracy"])' \
      "$tt_dir/stats.json" 2>/dev/null
}

# tt_not_worse DESCRIPTION "REF..." "CAND..." [K [SIGMA]]: one TAP line, ok
# when the mean of the CAND accuracies is at least the mean of the REF ones
# less the margin above; each list must hold K values (default 1): a run
# that failed fails the check. SIGMA: the job's (default $TT_FM_SIGMA).
tt_not_worse() {
  tt_verdict=$($PY - "$2" "$3" "${4:-1}" "${5:-$TT_FM_SIGMA}" <<'PYEOF'
import math, sys
ref, cand = ([float(v) for v in a.split()] for a in sys.argv[1:3])
k = int(sys.argv[3])
if len(ref) != k or len(cand) != k:
    print("%d and %d accuracies, not %d each: a run failed" % (len(ref), len(cand), k))
    sys.exit(1)
SIGMA, Z = float(sys.argv[4]), 3.09
margin = Z * SIGMA * math.sqrt(1 / len(ref) + 1 / len(cand))
mr, mc = sum(ref) / len(ref), sum(cand) / len(cand)
print("mean %.4f against %.4f: %+.4f, margin %.4f; %s against %s"
      % (mc, mr, mc - mr, margin, " ".join(map(str, cand)), " ".join(map(str, ref))))
sys.exit(0 if mc >= mr - margin else 1)
PYEOF
)
  ok $? "$1 ($tt_verdict)"
}

# ---- a reduced precision's first step against fp32's: paired ----
# The same seed gives two runs the same initial weights w0 and the same
# first batch, so the step that run's first update takes, g = w0 - w1 over
# the weights and biases, differs between fp32 and a reduced precision only
# by the rounding. Rounding to nearest is unbiased: |g_PREC| / |g_fp32| - 1
# centres near 0, where an operand or an output truncated instead of
# rounded shifts it by 1-2.5% (e2e_precision.sh says by how much). w0 comes
# from a run with learning rate 1e-30, which moves no weight.
#
# tt_grad_runs JOB PREFIX "PREC..." [ARG...]: for each seed in
# $TT_GRAD_SEEDS (default 1-6), one step of JOB (and the ARGs, --set ...)
# from w0 in fp32 and in each PREC, and the w0 run, into
# PREFIX-{w0,fp32,PREC}-SEED; a run that fails is added to $why.
tt_grad_runs() {
  tg_job=$1 tg_pre=$2 tg_precs=$3
  shift 3
  for tg_s in ${TT_GRAD_SEEDS:-1 2 3 4 5 6}; do
    tt_grad_step "$tg_pre-w0-$tg_s" $tg_s fp32 1e-30 "$@"
    for tg_p in fp32 $tg_precs; do
      tt_grad_step "$tg_pre-$tg_p-$tg_s" $tg_s $tg_p 0.02 "$@"
    done
  done
}
tt_grad_step() {
  tg_dir=$1 tg_seed=$2 tg_one=$3 tg_lr=$4
  shift 4
  "$TOWERTRAIN" run "$tg_job" --logdir "$tg_dir" --quiet --set seed=$tg_seed \
    --set max_epoch=1 --set steps_per_epoch=1 --set optimizer.learning_rate=$tg_lr \
    --set optimizer.weight_decay=0 --set "trainer.precision=\"$tg_one\"" \
    --set 'callbacks=( { type = "model_saver"; max_to_keep = 0; } )' --set 'monitors=( )' \
    "$@" >"$tg_dir.out" 2>&1 || why="$why $tg_dir failed;"
}

# tt_grad_size PREFIX PREC M0 S SE: the mean over the seeds of
# |g_PREC| / |g_fp32| - 1 from tt_grad_runs, and whether it lies within
# M0 +- (3.48 S / sqrt(k) + 2 SE) for k seeds: M0 and S the mean and (an
# upper confidence bound of) the sd of one seed's value, measured over many
# seeds, SE the standard error of that M0. 3.48: two-sided, 1 false failure
# in 2,000 for a correct program (normal tails); 2 SE leaves room for M0's
# own error and for another machine, whose rounding is as unbiased. Prints
# the mean, the interval and each seed's value; exits 1 outside.
tt_grad_size() {
  $PY - "$@" ${TT_GRAD_SEEDS:-1 2 3 4 5 6} <<'PYEOF'
import sys
import numpy as np
from tt_safetensors import load
pre, prec = sys.argv[1], sys.argv[2]
m0, s, se = (float(v) for v in sys.argv[3:6])
def w(kind, seed):
    t = load("%s-%s-%s/model-1.safetensors" % (pre, kind, seed))[0]
    return np.concatenate([t[k].astype(np.float64).ravel() for k in sorted(t)
                           if k.endswith((".weight", ".bias"))])
r = []
for seed in sys.argv[6:]:
    w0 = w("w0", seed)
    r.append(np.linalg.norm(w0 - w(prec, seed)) / np.linalg.norm(w0 - w("fp32", seed)) - 1)
margin = 3.48 * s / len(r) ** 0.5 + 2 * se
mean = float(np.mean(r))
print("mean %+.4f, allowed %+.4f..%+.4f; seeds %s" % (mean, m0 - margin, m0 + margin,
                                                      " ".join("%+.4f" % v for v in r)))
sys.exit(0 if abs(mean - m0) <= margin else 1)
PYEOF
}
