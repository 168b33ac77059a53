#!/bin/sh
# The GPU kit (tests/gpu/kit.sh, .gpu-kit/run) on a machine without a GPU
# (TAP): it builds and fits in 58 MiB; every library its binaries need
# resolves, by the loader itself, inside the kit or to glibc, libstdc++ or
# libgcc_s; it holds everything its run needs: a copy of it elsewhere, run
# with an empty environment (env -i), names no file of this source or build
# tree, trains on its own data with its own models, finds cuBLAS, cuDNN and
# NCCL (here the toolkit's), and its runner says "no GPU" with exit status 2
# and one line, writing nothing. With a stand-in nvidia-smi that lists a GPU,
# the runner goes through every check and its verdict: every GPU check a SKIP
# (towertrain sees no GPU), the CPU's bf16 checks run (oneDNN capped below
# bf16: its refusals) and pass, and one training check skipped for lack of data
# (a stand-in script), so it fails and says both, on its last line the count.
# A kit with a baseline (TT_KIT_BASELINE=HEAD): its build holds exactly
# HEAD's files, it carries towertrain-baseline, which runs, and the runner
# above (on a copy of it) measures the timeline's cost with both.
#
# The kit's build is kept in $TT_BUILDDIR/.gpu-kit-build: the first run
# configures and builds towertrain with CUDA (~3 min on 2 cores), later runs
# rebuild what changed (~15 s).
. "$(dirname "$0")/../tt_lib.sh"
: "${TT_BUILDDIR:?}"

if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
  skip "the GPU kit builds" "no CUDA toolkit here"
  tt_done
fi
if ! git -C "$TT_SRCDIR" rev-parse --git-dir >/dev/null 2>&1; then
  skip "the GPU kit builds" "the source tree is not a git checkout (the kit is built from one)"
  tt_done
fi

KIT=$T/kit
start=$(date +%s)
TT_KIT_BUILD="$TT_BUILDDIR/.gpu-kit-build" sh "$TT_SRCDIR/tests/gpu/kit.sh" "$KIT" >"$T/kit.out" 2>&1
rc=$?
size=$(du -sm "$KIT" 2>/dev/null | cut -f1)
[ $rc = 0 ] && [ -n "$size" ] && [ "$size" -le 58 ]
ok $? "tests/gpu/kit.sh builds the kit: $size MiB <= 58 (exit status $rc, $(($(date +%s) - start)) s)"
[ $rc = 0 ] || { sed 's/^/# /' "$T/kit.out" | tail -n 5; tt_done; }

# ---- a copy elsewhere, with an empty environment ----
mkdir -p "$T/elsewhere" && cp -a "$KIT" "$T/elsewhere/k"
K=$T/elsewhere/k
! grep -rIl -e "$TT_SRCDIR" -e "$TT_BUILDDIR" "$K" >"$T/refs" 2>/dev/null
ok $? "no file of the kit names the source or build tree$( [ -s "$T/refs" ] && echo ": $(tr '\n' ' ' <"$T/refs")")"

# the first use unpacks oneDNN (packed to fit)
dnnl=$(ldd "$TT_BUILDDIR/.gpu-kit-build/towertrain" | awk '$1 ~ /^libdnnl\.so/ { print $1, $3 }')
[ -n "$dnnl" ] && [ -f "$K/lib/${dnnl% *}.xz" ] && [ ! -e "$K/lib/${dnnl% *}" ] &&
  env -i "$K/bin/towertrain" --version >"$T/ver" 2>&1 && grep -q '^cuda: ' "$T/ver" &&
  grep -q '^cpu precision: fp32' "$T/ver" && cmp -s "$K/lib/${dnnl% *}" "$(readlink -f "${dnnl#* }")"
ok $? "env -i: the copy's bin/towertrain unpacks its oneDNN (${dnnl% *}) on first use, byte for byte the one it was built with, and runs"

# ---- the loader's view: each binary's libraries, transitively ----
bad=
for b in "$K"/libexec/*; do
  env -i LD_TRACE_LOADED_OBJECTS=1 "$b" >"$T/deps" 2>&1 || bad="$bad ${b##*/}: trace failed;"
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    case $path in
      not) bad="$bad ${b##*/}: $name not found;"; continue ;;
    esac
    case $(readlink -f "$path") in
      "$K"/lib/*) ;;
      *) case $name in
           libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|libstdc++.so.*|libgcc_s.so.*) ;;
           *) bad="$bad ${b##*/}: $name from $path;" ;;
         esac ;;
    esac
  done <"$T/deps"
done
[ -z "$bad" ] && [ "$(ls "$K"/libexec | wc -l)" = 9 ] && [ -s "$K/lib/${dnnl% *}" ]
ok $? "every library of the kit's 9 binaries resolves inside the kit or to glibc/libstdc++/libgcc_s (loader trace, env -i)${bad:+:$bad}"
! ls "$K/lib" | grep -q '^\(libc\|libm\|libstdc++\|libgcc_s\)\.so'
ok $? "the kit carries no glibc, libstdc++ or libgcc_s ($(ls "$K/lib" | tr '\n' ' '))"

env -i "$K/run" "$T/out" >"$T/run.out" 2>&1
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/run.out")" = 1 ] && grep -q '^no GPU' "$T/run.out" && [ ! -e "$T/out" ]
ok $? "env -i .gpu-kit/run without a GPU: exit status 2 (got $rc), one line '$(head -n 1 "$T/run.out")', nothing written"

D=$K/data/fashion-mnist
cat >"$T/cpu.cfg" <<EOF
dataflow = { source = { type = "idx"; images = "$D/train-images-idx3-ubyte.gz";
                        labels = "$D/train-labels-idx1-ubyte.gz"; };
             batch_size = 64; limit = 640; };
model = "$K/src/models/lenet.cfg";
optimizer = { type = "momentum"; learning_rate = 0.05; };
trainer = { type = "simple"; device = "cpu"; };
max_epoch = 1;
callbacks = ( "model_saver", { type = "inference_runner"; dataflow = {
  source = { type = "idx"; images = "$D/t10k-images-idx3-ubyte.gz"; labels = "$D/t10k-labels-idx1-ubyte.gz"; };
  batch_size = 500; limit = 1000; }; } );
monitors = ( "json" );
EOF
env -i "$K/bin/towertrain" run "$T/cpu.cfg" --logdir "$T/cpu" --quiet >"$T/cpu.out" 2>&1 &&
  [ -f "$T/cpu/model-10.safetensors" ] && grep -q validation_accuracy "$T/cpu/stats.json"
ok $? "env -i: the copy's towertrain trains LeNet on the copy's data and models, on the CPU"
n_train=$($PY -c 'import gzip,struct,sys; print(struct.unpack(">I", gzip.open(sys.argv[1]).read(8)[4:])[0])' "$D/train-images-idx3-ubyte.gz")
n_test=$($PY -c 'import gzip,struct,sys; print(struct.unpack(">I", gzip.open(sys.argv[1]).read(8)[4:])[0])' "$D/t10k-images-idx3-ubyte.gz")
[ "$n_train" = 60000 ] && [ "$n_test" = 10000 ]
ok $? "the kit's Fashion-MNIST: all 60,000 training and 10,000 test images (got $n_train, $n_test)"

# env.sh finds the NVIDIA libraries the binary opens (here: the toolkit's)
env -i sh -c ". '$K/env.sh'; nvlibs_find '$K/nvlibs.txt'; echo \"\$NVLIBS_PATH\"; echo \"missing:\$NVLIBS_MISSING\"" >"$T/nv" 2>&1
grep -q '^missing:$' "$T/nv" && [ "$(wc -l <"$K/nvlibs.txt")" = 3 ] &&
  env -i "$K/bin/towertrain" --version >"$T/ver" 2>&1 && grep -q '^cuda: ' "$T/ver" &&
  env -i LD_LIBRARY_PATH="$(head -n 1 "$T/nv")" "$K/libexec/test_cuda_libs" >"$T/libs.tap" 2>&1 &&
  ! grep -q '^not ok' "$T/libs.tap"
ok $? "env -i: the kit finds $(tr '\n' ' ' <"$K/nvlibs.txt")in $(head -n 1 "$T/nv"), and its test_cuda_libs loads them"

# PyTorch's pip layout, where the machine's toolkit has none of them: a
# stand-in nvidia namespace package (links to the toolkit's files) on
# PYTHONPATH, no toolkit directory; each soname from its package's lib/
P=$T/site/nvidia
mkdir -p "$P/cu13/lib" "$P/cudnn/lib" "$P/nccl/lib"
for f in /usr/local/cuda/lib64/libcublas*.so.* /usr/local/cuda/lib64/libnvrtc*.so.*; do [ -e "$f" ] && ln -s "$f" "$P/cu13/lib/"; done
for f in /usr/local/cuda/lib64/libcudnn*.so.*; do [ -e "$f" ] && ln -s "$f" "$P/cudnn/lib/"; done
ln -s /usr/local/cuda/lib64/libnccl.so.2 "$P/nccl/lib/"
env -i PATH=/usr/bin:/bin PYTHONPATH="$T/site" TT_KIT_CUDA= sh -c ". '$K/env.sh'; nvlibs_find '$K/nvlibs.txt'; echo \"\$NVLIBS_PATH\"; printf '%s' \"\$NVLIBS_FILES\"; echo \"missing:\$NVLIBS_MISSING\"" >"$T/pip" 2>&1
grep -q "^$P/cu13/lib:$P/cudnn/lib:$P/nccl/lib\$" "$T/pip" && grep -q "^libcudnn.so.9 $P/cudnn/lib/libcudnn.so.9\$" "$T/pip" &&
  grep -q '^missing:$' "$T/pip"
ok $? "no toolkit: the kit finds each library in python3's nvidia/*/lib ($(head -n 1 "$T/pip"))"
[ $? = 0 ] || sed 's/^/# /' "$T/pip"

# ---- a kit with a baseline: towertrain from HEAD, built in a copy of the
# kit's build directory that takes HEAD's files where they differ ----
KB=$T/kit-base
head_sha=$(git -C "$TT_SRCDIR" rev-parse --short HEAD)
TT_KIT_BASELINE=HEAD TT_KIT_BUILD="$TT_BUILDDIR/.gpu-kit-build" sh "$TT_SRCDIR/tests/gpu/kit.sh" "$KB" >"$T/kitb.out" 2>&1
rc=$?
BB=$TT_BUILDDIR/.gpu-kit-build-baseline
mkdir -p "$T/head" && git -C "$TT_SRCDIR" archive HEAD | tar -xf - -C "$T/head"
diff -rq "$T/head" "$BB" 2>&1 | grep -v "^Only in $BB" >"$T/base.diff"
[ $rc = 0 ] && grep -q "^baseline: HEAD ($head_sha): libexec/towertrain-baseline\$" "$KB/BUILD" &&
  [ ! -s "$T/base.diff" ] && [ "$(ls "$KB"/libexec | wc -l)" = 10 ] &&
  env -i "$KB/bin/towertrain-baseline" --version >"$T/basever" 2>&1 && grep -q '^cuda: ' "$T/basever"
ok $? "TT_KIT_BASELINE=HEAD: the kit says 'baseline: HEAD ($head_sha)', its baseline build holds HEAD's files$( [ -s "$T/base.diff" ] && echo " (not: $(head -n 3 "$T/base.diff" | tr '\n' ' '))"), and env -i bin/towertrain-baseline runs (exit status $rc)"
[ $rc = 0 ] || sed 's/^/# /' "$T/kitb.out" | tail -n 5
TT_KIT_BASELINE=no-such-ref TT_KIT_BUILD="$TT_BUILDDIR/.gpu-kit-build" sh "$TT_SRCDIR/tests/gpu/kit.sh" "$KB" >"$T/kitbad.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "TT_KIT_BASELINE=no-such-ref is no commit" "$T/kitbad.out" && [ -x "$KB/libexec/towertrain-baseline" ]
ok $? "TT_KIT_BASELINE=no-such-ref: exit status 1 (got $rc), '$(tail -n 1 "$T/kitbad.out")', the kit built before left as it was"
rm -rf "$K" && mkdir -p "$K" && cp -a "$KB/." "$K/"

# ---- the runner's way through, with a stand-in nvidia-smi that lists one
# GPU that towertrain cannot see: every GPU check SKIPs, so the run fails ----
mkdir -p "$T/fakebin"
cat >"$T/fakebin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
  -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;;
  *query-gpu=index*) echo "0, Stand-in GPU, 81559 MiB, 9.0" ;;
  *query-gpu=driver*) echo "580.00" ;;
  *) echo "| NVIDIA-SMI 580.00   Driver Version: 580.00   CUDA Version: 13.0 |" ;;
esac
EOF
chmod +x "$T/fakebin/nvidia-smi"
# TT_KIT_CONV_ONLY=1: convbench's step (no GPU here: convbench exits 1 and
# writes no conv.json), then test_gpu_ops alone (its graph API checks), counted, and a stop
# before the other checks: exit status 1 (no conv.json)
env -i PATH="$T/fakebin:/usr/bin:/bin" TT_KIT_CONV_ONLY=1 TT_KIT_CONV_BUDGET=30 "$K/run" "$T/convonly" >"$T/convonly.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q '^== convbench: .*(30s, bf16,tf32)$' "$T/convonly.out" &&
  grep -q '^test_gpu_ops .* [1-9][0-9]* passed   0 failed .* skipped' "$T/convonly.out" &&
  grep -q '^== [0-9]*s: TT_KIT_CONV_ONLY=1: the other checks and benchmarks not run$' "$T/convonly.out" &&
  ! grep -q '^test_cuda_libs\|^e2e_gpu' "$T/convonly.out"
ok $? "TT_KIT_CONV_ONLY=1: convbench, then test_gpu_ops alone (its graph API checks), then a stop (exit status 1 without conv.json, got $rc)"
[ $rc = 1 ] || sed 's/^/# /' "$T/convonly.out" | tail -n 10
# and one check script that skips a training check for lack of data, as
# the GPU scripts do where Fashion-MNIST is missing: the runner must fail on it
cat >"$K/src/tests/gpu/e2e_gpu_trainers.sh" <<'EOF'
echo "ok 1 - GPU training runs on one GPU # SKIP dataset-fashion-mnist not installed"
echo "1..1"
EOF
# The runner's CPU checks (test_bf16, e2e_precision.sh) with oneDNN capped
# at AVX512_CORE: the same checks on every CPU, bf16's refusals (bf16 itself
# is e2e_precision.sh's in make check; uncapped, its LeNet runs would take
# 40 s more on a CPU with bf16); make check-cpus runs them on its emulated
# CPU (TT_EMULATOR, tt_lib.sh).
env -i PATH="$T/fakebin:/usr/bin:/bin" TT_KIT_BENCH=0 ONEDNN_MAX_CPU_ISA=AVX512_CORE \
  ${TT_EMULATOR:+TT_EMULATOR="$TT_EMULATOR"} "$K/run" "$T/fake" >"$T/fake.out" 2>&1
rc=$?
last=$(tail -n 1 "$T/fake.out")
# the runner names the CPU's bf16 features as CPUID gives them (tt_cpuid)
tt_cpu_has amx_bf16 && amx=yes || amx=no
tt_cpu_has avx512_bf16 && avx512bf16=yes || avx512bf16=no
[ $rc = 1 ] && echo "$last" | grep -q '^[0-9][0-9]* passed, [0-9][0-9]* failed, [1-9][0-9]* skipped$' &&
  grep -q "skipped with 'no GPU' though nvidia-smi lists 1" "$T/fake.out" &&
  grep -q "^FAIL: 1 training check(s) skipped for lack of data$" "$T/fake.out" &&
  grep -q '^== convbench: ' "$T/fake.out" && grep -q '^   convbench: exit status 1 ' "$T/fake.out" &&
  grep -q '^   conv_torch.py: exit status 2 ' "$T/fake.out" &&
  grep -q '^test_cuda_libs .* [1-9][0-9]* passed   0 failed' "$T/fake.out" &&
  grep -q '^e2e_gpu_trainers.sh' "$T/fake.out" && grep -q '^compute-sanitizer' "$T/fake.out" &&
  grep -q "^== cupti_cost: timing events against CUPTI's kernel records (/usr/local/cuda/" "$T/fake.out" &&
  grep -q '^== bench/timeline/run --device gpu: .* towertrain (' "$T/fake.out" &&
  grep -q '^== bench/timeline/run --device gpu: .* towertrain-baseline (' "$T/fake.out" &&
  grep -q "^== CPU: .* cores; AMX: $amx, AVX512_BF16: $avx512bf16\$" "$T/fake.out" &&
  grep -q '^test_bf16 .* [1-9][0-9]* passed   0 failed' "$T/fake.out" &&
  grep -q '^e2e_precision.sh .* [1-9][0-9]* passed   0 failed' "$T/fake.out" &&
  grep -q 'libcudnn.so.9 *cuDNN 9\.' "$T/fake.out" && [ -s "$T/fake/checks.tap" ] && [ -s "$T/fake/run.log" ]
ok $? "the runner (a kit with a baseline) with a GPU towertrain cannot see and a check without its data: convbench first (it finds no GPU: exit status 1), every check run and counted, the timeline's cost with both binaries, exit status 1 (got $rc), both reasons, last line '$last'"
[ $rc = 1 ] || sed 's/^/# /' "$T/fake.out" | tail -n 15
grep '^== CPU: \|^== bf16 on' "$T/fake.out" | sed 's/^/# runner: /'
tt_done
