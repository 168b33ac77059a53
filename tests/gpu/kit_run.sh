#!/bin/sh
# The GPU kit's runner (.gpu-kit/run, from tests/gpu/kit_run.sh; the kit is
# built by tests/gpu/kit.sh). On a machine with an NVIDIA GPU:
#
#   .gpu-kit/run [OUTDIR]        OUTDIR default ./gpu-kit-out
#
# finds NVIDIA's libraries (env.sh: the CUDA toolkit's, else PyTorch's pip
# packages), prints the GPU, the driver, the CUDA, cuBLAS, cuDNN and NCCL
# versions loaded and the CPU (AMX, AVX512_BF16), runs convbench first
# (below: which way of running each ResNet-50 convolution is fast, against
# PyTorch), then runs every GPU check, each a TAP stream:
#   test_cuda_libs, test_precision   the CUDA build's libraries, precisions
#   test_gpu_ops                     every backend operation against the CPU
#                                    backend in fp32, tf32, bf16 and fp16, and
#                                    the graph API's convolution plans against
#                                    float64, each pass and layout
#   test_gpu_precision               fp16 loss scaling in every trainer type
#   e2e_gpu.sh                       LeNet reaching the CPU run's accuracy,
#                                    repeatability, checkpoints across devices,
#                                    NCCL at every size, 2-GPU trainers
#   e2e_gpu_precision.sh             bf16 and fp16 against fp32, resume
#   e2e_gpu_trainers.sh              every trainer type on one GPU, SIGTERM
#                                    and resume, eval
#   compute-sanitizer                memcheck and racecheck over a short run
#   test_bf16, e2e_precision.sh      bf16 on CPU towers, on this machine's
#                                    CPU (it may have AMX), and with AMX
#                                    again on the AVX512_BF16 path
# then `towertrain profile` of ResNet-50, cupti_cost (CUPTI's kernel
# records against timing events on steps of small kernels),
# bench/timeline/run --device gpu (what recording a timeline costs a step
# of GPU towers: layer spans on the compute stream, pack spans on the
# communication stream), and
# bench/gpu/run (towertrain against PyTorch on this GPU). Checks that
# need two GPUs SKIP, visibly. The last line is "N passed, N failed, N
# skipped"; the exit status is 0 only when nothing failed, no training check
# was skipped for lack of data and towertrain saw the GPU. Without a GPU:
# one line "no GPU ..." and exit status 2, nothing written.
#
# OUTDIR receives few files (the device tool brings back at most 8):
# conv.json (convbench's and PyTorch's convolution times, first), run.log
# (all this prints), checks.tap (every check's TAP, one section a
# program), stderr.log (what the checks wrote on stderr), sanitizer.log,
# profile.txt (`towertrain profile` of ResNet-50 in bf16 and tf32: where a
# step's time goes on this GPU, layer by layer), bench.txt and bench.json.
#
# Sizing: 5.5 minutes on one H100 (BUDGET), so that a device call of
# timeout_s 360 leaves, after the machine's start, time for one rerun in the
# 15 minutes of a session (and well inside the 8 minutes asked). The checks are small on purpose
# (LeNet on 2048 to 60,000 Fashion-MNIST images, 1-3 epochs: about a
# second of GPU work per run; the CPU reference runs on the machine's 16
# cores), so most of their time is process and CUDA start-up (~1 s each,
# ~60 runs). Each step runs under a time limit (STEP_LIMIT below, seconds),
# the sanitizer runs train 4 steps of LeNet, the CPU's bf16 checks take
# 30-40 s a path (two where the CPU has AMX), the timeline's cost about 40 s
# (LeNet, 1 tower and packing, 2 rounds of a process each, 10 recorded and
# clean epochs interleaved in each; bench/timeline/run --budget stops it
# early and prints the rounds done), and the benchmark gets what is
# left of BUDGET (330 s) less a reserve, and sizes itself to it (bench/gpu/run
# --budget; ResNet-50 first, bf16 first, so that what a short budget leaves
# out is the least telling): it stops measuring, visibly, when that is spent, and compiles
# with torch.compile only while time is left after the rounds.
# TT_KIT_BUDGET (seconds, default 330) changes the total; TT_KIT_BENCH=0
# leaves the benchmark out, TT_KIT_TIMELINE=0 the timeline's cost,
# TT_KIT_PROFILE=0 the profile, TT_KIT_BF16=0 the CPU's bf16 checks;
# TT_KIT_GRAPH=0 the captured step's graph-against-eager benchmark (LeNet
# and ResNet-20, TT_KIT_GRAPH_BUDGET s, default 60, before the benchmark),
# TT_KIT_NHWC=0 the float32 NHWC-against-NCHW one (ResNet-50 and ResNet-20
# in TT_KIT_NHWC_PRECISIONS, default tf32; TT_KIT_NHWC_BUDGET s, default
# 60, after it);
# TT_KIT_BENCH_MODELS (default resnet50,resnet20,lenet) and
# TT_KIT_BENCH_PRECISIONS (default bf16,tf32,fp32) choose what the benchmark
# measures. A kit built with a baseline (kit.sh's TT_KIT_BASELINE) measures
# it too: the timeline's cost once more with bin/towertrain-baseline, and
# the benchmark's rounds with it beside towertrain (bench/gpu/run
# --baseline: the column "vs base").
set -u
KIT=$(cd "$(dirname "$0")" && pwd) || exit 1
: "${PATH:=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
export PATH
BUDGET=${TT_KIT_BUDGET:-330}

# ---- a GPU? ----
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')
  [ "$gpus" -gt 0 ] || { echo "no GPU: nvidia-smi lists no device ($(nvidia-smi -L 2>&1 | head -n 1))" >&2; exit 2; }
else
  ls /dev/nvidia[0-9]* >/dev/null 2>&1 ||
    { echo "no GPU: no nvidia-smi and no /dev/nvidia0 on this machine (the kit runs where an NVIDIA GPU is)" >&2; exit 2; }
  gpus=$(ls /dev/nvidia[0-9]* | wc -l)
fi

OUTDIR=${1:-$PWD/gpu-kit-out}
mkdir -p "$OUTDIR" || { echo "run: cannot create $OUTDIR" >&2; exit 1; }
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG=$OUTDIR/run.log TAP=$OUTDIR/checks.tap ERR=$OUTDIR/stderr.log SAN=$OUTDIR/sanitizer.log
: >"$LOG"; : >"$TAP"; : >"$ERR"; : >"$SAN"
say() { echo "$*" | tee -a "$LOG"; }
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }

# ---- NVIDIA's libraries, for towertrain alone ----
. "$KIT/env.sh"
kit_unpack "$KIT" || exit 1
nvlibs_find "$KIT/nvlibs.txt"
TT_KIT_NVPATH=$NVLIBS_PATH
export TT_KIT_NVPATH
LDP=$TT_KIT_NVPATH${LD_LIBRARY_PATH:+${TT_KIT_NVPATH:+:}$LD_LIBRARY_PATH}
PY=$(command -v python3 || echo /usr/bin/python3)

# a copy that lost its modes on the way still runs
chmod +x "$KIT"/libexec/* "$KIT"/bin/* "$KIT"/src/tests/gpu/*.sh "$KIT/src/bench/gpu/run" \
  "$KIT/src/bench/timeline/run" "$KIT/src/bench/roofline/bf16_ratio" 2>/dev/null
say "== $(head -n 1 "$KIT/BUILD")"
sed -n '2,$p' "$KIT/BUILD" | sed 's/^/   /' | tee -a "$LOG"
say "== GPU: $(nvidia-smi --query-gpu=index,name,memory.total,compute_cap --format=csv,noheader 2>/dev/null | tr '\n' ';')"
say "   driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1), $(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n 1) (the driver's)"
# the host's CPU: its bf16 paths decide what the bf16 step below runs. Its
# features from CPUID (tests/tt_cpuid), which under TT_EMULATOR (make
# check-cpus, tests/tt_lib.sh) is the emulated CPU's, where /proc/cpuinfo is
# the host's. Only the CPU's checks (the bf16 step) run emulated.
emulator=${TT_EMULATOR:-}
unset TT_EMULATOR
# shellcheck disable=SC2086
cpu_flags=" $($emulator "$KIT/tests/tt_cpuid" | cut -d: -f2) "
has_flag() { case $cpu_flags in *" $1 "*) echo yes ;; *) echo no ;; esac; }
cpu_amx=$(has_flag amx_bf16) cpu_avx512bf16=$(has_flag avx512_bf16)
say "== CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores; AMX: $cpu_amx, AVX512_BF16: $cpu_avx512bf16"
say "   CUDA runtime linked in towertrain: $("$KIT/libexec/towertrain" --version | sed -n 's/^cuda: .*(\(CUDA [0-9.]*\).*/\1/p') (static cudart)"
printf '%s' "$NVLIBS_FILES" | "$PY" -c '
import ctypes, sys
for line in sys.stdin:
    so, path = line.split()
    try:
        lib = ctypes.CDLL(path)
        if so.startswith("libcublas"):
            v = []
            for t in range(3):
                x = ctypes.c_int()
                lib.cublasGetProperty(t, ctypes.byref(x)); v.append(x.value)
            ver = "cuBLAS %d.%d.%d" % tuple(v)
        elif so.startswith("libcudnn"):
            lib.cudnnGetVersion.restype = ctypes.c_size_t
            x = lib.cudnnGetVersion(); ver = "cuDNN %d.%d.%d" % (x // 10000, x // 100 % 100, x % 100)
        else:
            x = ctypes.c_int(); lib.ncclGetVersion(ctypes.byref(x)); x = x.value
            ver = "NCCL %d.%d.%d" % (x // 10000, x // 100 % 100, x % 100)
    except Exception as e:
        ver = "version unknown (%s)" % e
    print("   %-18s %s  %s" % (so, ver, path))
' 2>&1 | tee -a "$LOG"
[ -z "$NVLIBS_MISSING" ] || say "   NOT FOUND: $NVLIBS_MISSING (looked in the CUDA toolkit and python3's nvidia/*/lib)"
say "   library path for towertrain: ${TT_KIT_NVPATH:-(none needed)}"

# ---- the checks ----
passed=0 failed=0 skipped=0 data_skips=0 gpu_skips=0
T=$(mktemp -d "${TMPDIR:-/tmp}/gpu-kit.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

# limit SECONDS: SECONDS, or less when the budget is nearly spent (60 s kept
# for the benchmark's minimum)
limit() {
  left=$((BUDGET - 60 - $(elapsed)))
  [ "$left" -lt "$1" ] && echo $((left > 10 ? left : 10)) || echo "$1"
}

# count NAME RC FILE: the TAP lines of FILE counted in; a program that exited
# non-zero without a failing check, or never printed its plan, fails once more
count() {
  name=$1 rc=$2 f=$3
  p=$(grep -c '^ok ' "$f" | tr -d ' ')
  s=$(grep -c '^ok .*# SKIP' "$f" | tr -d ' ')
  nf=$(grep -c '^not ok' "$f" | tr -d ' ')
  p=$((p - s))
  extra=
  if [ "$rc" != 0 ] && [ "$nf" = 0 ]; then nf=1; extra=" (exit status $rc, no failing check printed)"; fi
  if ! grep -q '^1\.\.[0-9]' "$f"; then nf=$((nf + 1)); extra="$extra (no TAP plan: it stopped early)"; fi
  [ "$rc" = 124 ] && extra="$extra (time limit)"
  passed=$((passed + p)) failed=$((failed + nf)) skipped=$((skipped + s))
  d=$(grep '^ok .*# SKIP' "$f" | grep -ci 'not installed\|dataset\|no data' | tr -d ' ')
  g=$(grep '^ok .*# SKIP' "$f" | grep -ci 'no GPU' | tr -d ' ')
  data_skips=$((data_skips + d)) gpu_skips=$((gpu_skips + g))
  say "$(printf '%-22s %3d passed %3d failed %3d skipped  %4ds%s' "$name" "$p" "$nf" "$s" "$(elapsed)" "$extra")"
  grep '^not ok\|# SKIP' "$f" | sed 's/^/     /' | tee -a "$LOG"
  { echo "# ==== $name (exit status $rc)"; cat "$f"; } >>"$TAP"
}

# check NAME SECONDS COMMAND...: runs COMMAND (its TAP on stdout) with a
# time limit, and counts its checks
check() {
  name=$1 secs=$(limit "$2")
  shift 2
  echo "# ==== $name" >>"$ERR"
  timeout -k 10 "$secs" "$@" >"$T/$name.tap" 2>>"$ERR"
  count "$name" $? "$T/$name.tap"
}

# ---- first, convbench (issue 36): ResNet-50's 23 distinct convolution
# shapes x forward, backward data, backward filter, in each way the CUDA
# backend can run them (legacy API DEFAULT / TENSOR_OP math, NCHW / NHWC;
# graph API heuristic top-1 and autotuned), then PyTorch's times for the same
# shapes (bench/gpu/conv_torch.py: channels_last, cudnn.benchmark), then the
# summary: which way is fast, shape by shape, against PyTorch. Within
# TT_KIT_CONV_BUDGET seconds (default 120; two thirds convbench, the rest
# PyTorch), precisions TT_KIT_CONV_PRECS (default bf16,tf32), bf16 first;
# into conv.json (convbench's results after each row, PyTorch's as "torch")
# and run.log. This time comes out of BUDGET. TT_KIT_CONV=0 leaves it out;
# TT_KIT_CONV_ONLY=1 runs it and test_gpu_ops (with the graph API's plans
# against float64) alone, and stops (a slot for convbench) ----
if [ "${TT_KIT_CONV:-1}" != 0 ]; then
  cb=${TT_KIT_CONV_BUDGET:-120}
  cprec=${TT_KIT_CONV_PRECS:-bf16,tf32}
  say "== convbench: ResNet-50's convolutions, every way the backend runs them (${cb}s, $cprec)"
  echo "# ==== convbench" >>"$ERR"
  { timeout -k 5 $((cb * 2 / 3 + 15)) env "LD_LIBRARY_PATH=$LDP" "$KIT/libexec/convbench" \
      --prec "$cprec" --budget $((cb * 2 / 3)) --json "$OUTDIR/conv.json" 2>>"$ERR"
    echo "   convbench: exit status $? ($(elapsed)s)"; } | tee -a "$LOG"
  { timeout -k 5 $((cb / 3 + 20)) env PYTHONUNBUFFERED=1 "$PY" "$KIT/src/bench/gpu/conv_torch.py" \
      --shapes "$OUTDIR/conv.json" --json "$OUTDIR/conv.json" --prec "$cprec" \
      --budget $((cb / 3)) 2>>"$ERR"
    echo "   conv_torch.py: exit status $? ($(elapsed)s)"; } | tee -a "$LOG"
  "$KIT/libexec/convbench" --summary "$OUTDIR/conv.json" 2>&1 | tee -a "$LOG"
  if [ "${TT_KIT_CONV_ONLY:-0}" = 1 ]; then
    # and whether the graph API's plans compute the right thing (with
    # every other backend operation's check), within 60 s of its own
    echo "# ==== test_gpu_ops" >>"$ERR"
    timeout -k 5 60 env "LD_LIBRARY_PATH=$LDP" "$KIT/libexec/test_gpu_ops" >"$T/test_gpu_ops.tap" 2>>"$ERR"
    count test_gpu_ops $? "$T/test_gpu_ops.tap"
    say "== $(elapsed)s: TT_KIT_CONV_ONLY=1: the other checks and benchmarks not run"
    say "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" = 0 ] && [ -s "$OUTDIR/conv.json" ]
    exit $?
  fi
fi

export TOWERTRAIN="$KIT/bin/towertrain" TT_SRCDIR="$KIT/src" TT_BUILDDIR="$KIT" PYTHON3="$PY"
export TT_FASHION_MNIST="$KIT/data/fashion-mnist"
unset TT_GPUS
say "== checks (TAP in $TAP)"
for p in test_cuda_libs test_precision test_gpu_ops test_gpu_precision; do
  check "$p" 120 env "LD_LIBRARY_PATH=$LDP" "$KIT/libexec/$p"
done
for s in e2e_gpu e2e_gpu_precision e2e_gpu_trainers; do
  check "$s.sh" 180 sh "$KIT/src/tests/gpu/$s.sh"
done

# ---- compute-sanitizer: 4 steps of LeNet (cuDNN, cuBLAS and our kernels),
# then an eval pass, under memcheck and under racecheck ----
san=$(command -v compute-sanitizer 2>/dev/null)
for d in ${CUDA_HOME:+"$CUDA_HOME"} /usr/local/cuda; do
  [ -n "$san" ] && break
  for c in "$d/bin/compute-sanitizer" "$d/compute-sanitizer/compute-sanitizer"; do
    [ -x "$c" ] && san=$c && break
  done
done
D=$TT_FASHION_MNIST
cat >"$T/san.cfg" <<EOF
seed = 5;
dataflow = { source = { type = "idx"; images = "$D/train-images-idx3-ubyte.gz";
                        labels = "$D/train-labels-idx1-ubyte.gz"; };
             batch_size = 64; limit = 256; };
model = "$KIT/src/models/lenet.cfg";
optimizer = { type = "momentum"; learning_rate = 0.05; momentum = 0.9; };
trainer = { type = "simple"; device = "gpu"; };
max_epoch = 1;
callbacks = ( "model_saver" );
monitors = ( "json" );
EOF
{
  n=0
  for tool in memcheck racecheck; do
    n=$((n + 1))
    if [ -z "$san" ]; then
      echo "ok $n - compute-sanitizer --tool $tool: 4 LeNet steps on the GPU # SKIP compute-sanitizer not found"
      continue
    fi
    timeout -k 10 "$(limit 150)" env "LD_LIBRARY_PATH=$LDP" \
      "$san" --tool $tool --error-exitcode 9 --print-limit 20 \
      "$KIT/libexec/towertrain" run "$T/san.cfg" --logdir "$T/san-$tool" --quiet >"$T/$tool.log" 2>&1
    rc=$?
    { echo "==== compute-sanitizer --tool $tool (exit status $rc)"; cat "$T/$tool.log"; } >>"$SAN"
    [ $rc = 0 ] && grep -q 'SUMMARY' "$T/$tool.log" && [ -f "$T/san-$tool/model-4.safetensors" ]
    [ $? = 0 ] && echo "ok $n - compute-sanitizer --tool $tool: 4 LeNet steps on the GPU, no finding" ||
      echo "not ok $n - compute-sanitizer --tool $tool: 4 LeNet steps on the GPU (exit status $rc; see sanitizer.log)"
  done
  echo "1..$n"
} >"$T/sanitizer.tap"
count compute-sanitizer 0 "$T/sanitizer.tap"

# ---- bf16 on this machine's CPU (CPU towers' trainer.precision = "bf16"):
# test_bf16 and e2e_precision.sh on the path oneDNN takes here, and where
# the CPU has AMX again with oneDNN capped at AVX512_CORE_BF16 (the path of
# a CPU without AMX), then bench/roofline/bf16_ratio on both paths (bf16
# over fp32 of each model: never below 1.0x). A GPU machine's host may be
# the only AMX CPU this project meets; elsewhere the checks SKIP visibly.
# About 30 s a path on 16 cores, and 30 s a path for the ratios;
# TT_KIT_BF16=0 leaves it out ----
if [ "${TT_KIT_BF16:-1}" != 0 ]; then
  [ -z "$emulator" ] || export TT_EMULATOR="$emulator"
  say "== bf16 on this machine's CPU ($("$KIT/bin/towertrain" --version | sed -n 's/^cpu precision: //p'))"
  # shellcheck disable=SC2086
  check test_bf16 60 $emulator "$KIT/libexec/test_bf16"
  check e2e_precision.sh 150 sh "$KIT/src/tests/e2e_precision.sh"
  # AMX where oneDNN finds it (the CPU's, under the environment's ONEDNN_MAX_CPU_ISA)
  if "$KIT/bin/towertrain" --version | grep -q '^cpu precision: .*(bf16 on AMX)'; then
    check test_bf16.avx512_bf16 60 env ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 "$KIT/libexec/test_bf16"
    check e2e_precision.avx512_bf16 150 env ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 \
      sh "$KIT/src/tests/e2e_precision.sh"
    # bf16 over fp32 on both paths (into run.log): bf16 must not be slower
    for isa in "" AVX512_CORE_BF16; do
      say "== bench/roofline/bf16_ratio${isa:+ with ONEDNN_MAX_CPU_ISA=$isa}"
      { timeout -k 5 "$(limit 60)" env ${isa:+ONEDNN_MAX_CPU_ISA=$isa} "$PY" \
          "$KIT/src/bench/roofline/bf16_ratio" --towertrain "$KIT/bin/towertrain" --rounds 2 2>&1
        echo "   exit status $?"; } | tee -a "$LOG"
    done
  fi
  unset TT_EMULATOR
fi

# ---- towertrain profile: ResNet-50 on random data, batch 128, in bf16
# and tf32, a warm-up and 10 steps each (about 25 s each, most of it
# cuDNN's algorithm search); TT_KIT_PROFILE=0 leaves it out ----
if [ "${TT_KIT_PROFILE:-1}" != 0 ]; then
  say "== towertrain profile: ResNet-50, batch 128 (profile.txt)"
  : >"$OUTDIR/profile.txt"
  for prec in bf16 tf32; do
    p=$prec tf=false
    [ "$prec" = tf32 ] && p=fp32 tf=true
    cat >"$T/profile-$prec.cfg" <<EOF
model = "$KIT/src/models/resnet50.cfg";
dataflow = { source = { type = "fake"; shape = [3, 224, 224]; classes = 1000; size = 2560; };
             batch_size = 128; prefetch = { workers = 8; queue = 8; }; };
optimizer = { type = "momentum"; learning_rate = 0.01; momentum = 0.9; weight_decay = 0.0001; };
trainer = { type = "simple"; device = "gpu"; precision = "$p"; tf32 = $tf; deterministic = false; };
max_epoch = 1;
EOF
    echo "==== towertrain profile: ResNet-50 $prec" >>"$OUTDIR/profile.txt"
    timeout -k 5 "$(limit 60)" "$KIT/bin/towertrain" profile "$T/profile-$prec.cfg" --steps 10 \
      >>"$OUTDIR/profile.txt" 2>&1
    say "   $prec: exit status $?"
  done
fi

# ---- what recording a timeline costs a step of GPU towers (issue 25's
# at most 5%): bench/timeline/run --device gpu, LeNet on one tower and with
# gradient packing (2 towers where there are 2 GPUs), recorded and clean
# 200-step epochs interleaved in each process, 10 cycles in each of 2
# processes a configuration (20 recorded epochs each: the overhead's 95%
# interval), with event_cost's direct figure, about 40 s (into run.log);
# TT_KIT_TIMELINE=0 leaves it out ----
BASELINE=
[ -x "$KIT/libexec/towertrain-baseline" ] && BASELINE=$KIT/bin/towertrain-baseline
if [ "${TT_KIT_TIMELINE:-1}" != 0 ]; then
  # the other way of timing kernels: CUPTI's activity records against
  # timing events, on steps of 32 kernels launch-bound and device-bound
  # (bench/timeline/cupti_cost.cu, about 20 s)
  nvlibs_find "$KIT/cupti.txt"
  say "== cupti_cost: timing events against CUPTI's kernel records (${NVLIBS_PATH:-no $(cat "$KIT/cupti.txt") found})"
  { timeout -k 5 "$(limit 45)" env "LD_LIBRARY_PATH=${NVLIBS_PATH:+$NVLIBS_PATH:}$LDP" \
      "$KIT/libexec/cupti_cost" 32 0,15 3 2>&1
    echo "   exit status $?"; } | tee -a "$LOG"
  ntw=1
  [ "$gpus" -ge 2 ] && ntw=2
  for tt in towertrain ${BASELINE:+towertrain-baseline}; do
    secs=$(limit 55)
    say "== bench/timeline/run --device gpu: what recording a timeline costs a step, $tt (${secs}s)"
    { timeout -k 5 "$secs" "$PY" "$KIT/src/bench/timeline/run" --towertrain "$KIT/bin/$tt" \
        --device gpu --device-towers $ntw --models lenet --steps 200 --rounds 2 --cycles 10 \
        --event-cost "$KIT/libexec/event_cost" \
        --budget $((secs > 25 ? secs - 10 : 15)) --data "$TT_FASHION_MNIST" 2>&1
      echo "   exit status $?"; } | tee -a "$LOG"
  done
fi

# bench_setting NAME SETTING MODELS PRECISIONS SECONDS: bench/gpu/run with
# a wrapper that runs bin/towertrain under the environment SETTING as its
# towertrain and bin/towertrain itself as its baseline, so "vs base" is the
# setting against the default; one round, into bench_NAME.json and .txt.
bench_setting() {
  printf '#!/bin/sh\n%s exec "%s" "$@"\n' "$2" "$KIT/bin/towertrain" >"$T/towertrain-$1" &&
    chmod +x "$T/towertrain-$1"
  { timeout -k 5 "$5" "$PY" "$KIT/src/bench/gpu/run" --towertrain "$T/towertrain-$1" \
      --baseline "$KIT/bin/towertrain" --models "$3" --precisions "$4" --rounds 1 \
      --budget $(($5 > 25 ? $5 - 10 : 15)) --json "$OUTDIR/bench_$1.json" 2>&1
    echo "   exit status $?"; } | tee "$OUTDIR/bench_$1.txt" | tee -a "$LOG"
}

# ---- the captured step (TT_CUDA_GRAPH=1) against eager steps ----
# "vs base" is graph / eager: LeNet and ResNet-20 (the small models the
# graph is for) in bf16 and tf32, TT_KIT_GRAPH_BUDGET seconds (default 60)
# taken from the benchmark's; TT_KIT_GRAPH=0 (or TT_KIT_BENCH=0) leaves it
# out.
if [ "${TT_KIT_BENCH:-1}" != 0 ] && [ "${TT_KIT_GRAPH:-1}" != 0 ]; then
  gsecs=${TT_KIT_GRAPH_BUDGET:-60}
  say "== the captured step: bench/gpu/run, TT_CUDA_GRAPH=1 against eager steps (${gsecs}s)"
  bench_setting graph TT_CUDA_GRAPH=1 lenet,resnet20 bf16,tf32 "$gsecs"
fi

# ---- tf32 in float32 NHWC (TT_CUDA_LAYOUT=nhwc) against NCHW ----
# "vs base" is float32 NHWC / NCHW, the measurement precision.c's
# PREC_TF32_NHWC waits for: ResNet-50 and ResNet-20 in
# TT_KIT_NHWC_PRECISIONS (default tf32), TT_KIT_NHWC_BUDGET seconds
# (default 60) taken from the benchmark's; TT_KIT_NHWC=0 (or
# TT_KIT_BENCH=0) leaves it out. convbench's tf32 rows time the same
# convolutions shape by shape (legacy-nhwc, graph-auto).
if [ "${TT_KIT_BENCH:-1}" != 0 ] && [ "${TT_KIT_NHWC:-1}" != 0 ]; then
  nsecs=${TT_KIT_NHWC_BUDGET:-60}
  say "== float32 NHWC: bench/gpu/run, TT_CUDA_LAYOUT=nhwc against NCHW (${nsecs}s)"
  bench_setting nhwc TT_CUDA_LAYOUT=nhwc resnet50,resnet20 "${TT_KIT_NHWC_PRECISIONS:-tf32}" "$nsecs"
fi

# ---- the benchmark: what is left of the budget, less 20 s ----
left=$((BUDGET - 20 - $(elapsed)))
say "== bench/gpu/run (towertrain against PyTorch on this GPU; ${left}s)"
if [ "${TT_KIT_BENCH:-1}" = 0 ]; then
  say "   skipped: TT_KIT_BENCH=0"
elif [ "$left" -ge 30 ]; then
  # it starts nothing that would end after left - 15 s (by the times it
  # sees), and a SIGTERM at left s ends it with its table printed
  timeout -k 5 "$left" "$PY" "$KIT/src/bench/gpu/run" --towertrain "$KIT/bin/towertrain" \
    ${BASELINE:+--baseline "$BASELINE"} --models "${TT_KIT_BENCH_MODELS:-resnet50,resnet20,lenet}" \
    --precisions "${TT_KIT_BENCH_PRECISIONS:-bf16,tf32,fp32}" \
    --budget $((left - 15)) --compile --json "$OUTDIR/bench.json" 2>&1 | tee "$OUTDIR/bench.txt" | tee -a "$LOG"
else
  say "   skipped: no time left in the budget (${BUDGET}s)"
fi

# ---- the verdict ----
say "== $(elapsed)s"
verdict=0
if [ "$data_skips" -gt 0 ]; then
  say "FAIL: $data_skips training check(s) skipped for lack of data"; verdict=1
fi
if [ "$gpu_skips" -gt 0 ]; then
  say "FAIL: $gpu_skips check(s) skipped with 'no GPU' though nvidia-smi lists $gpus: towertrain did not see it"; verdict=1
fi
[ "$failed" = 0 ] || verdict=1
say "$passed passed, $failed failed, $skipped skipped"
exit $verdict
