#!/bin/sh
# tests/gpu/kit.sh [KITDIR] - builds the GPU kit: everything a lent GPU
# machine needs to run every GPU check and the GPU benchmark in one call,
# without configure, make or this source tree (that machine has CUDA and
# PyTorch, but no libconfig, cJSON, OpenBLAS, oneDNN, libpng, TurboJPEG,
# Open MPI or autotools).
#
#   tests/gpu/kit.sh               -> .gpu-kit/ at the top of the tree
#   TT_KIT_BASELINE=REF tests/gpu/kit.sh
#                                  -> the same, with a baseline (below)
#   .gpu-kit/run [OUTDIR]          on the GPU machine (see .gpu-kit/run)
#
# The kit (KITDIR, default .gpu-kit, git-ignored):
#   run                the runner;  env.sh  what it and bin/towertrain share
#   bin/towertrain     a wrapper: the library path for towertrain alone
#   libexec/           towertrain with CUDA, test_cuda_libs, test_precision,
#                      test_gpu_ops, test_gpu_precision, test_bf16,
#                      convbench (bench/gpu: the runner's first step) (RPATH
#                      $ORIGIN/../lib), event_cost (bench/timeline: a timing
#                      event's cost), cupti_cost (what CUPTI's kernel records
#                      would cost a step instead); with TT_KIT_BASELINE=REF also
#                      towertrain-baseline, towertrain built from git REF
#                      (and bin/towertrain-baseline), which the runner's
#                      timeline and benchmark steps measure beside
#                      towertrain: a change's effect on the GPU, side by side
#   lib/               every shared library they need that is not glibc,
#                      libstdc++ or libgcc_s, as the loader resolves it here
#                      (oneDNN packed with xz, 40 -> 7 MB: env.sh unpacks it)
#                      (cuBLAS, cuDNN and NCCL are opened with dlopen and
#                      come from the GPU machine: the toolkit's, else PyTorch's
#                      pip packages)
#   src/               the test scripts, models, jobs, bench/gpu,
#                      bench/timeline/run and bench/roofline/bf16_ratio
#   data/fashion-mnist Fashion-MNIST, IDX, gzip (60,000 training and 10,000
#                      test images; TT_KIT_TRAIN=N keeps N >= 12,000 training)
#   BUILD              what was built from what
#
# The build: a copy of the source tree in $TT_KIT_BUILD (default
# .gpu-kit-build/, git-ignored), configured --without-mpi (Open MPI's
# libraries and plugins do not travel; the kit has one process, and the GPU
# machine one GPU) and --with-dnnl (the configuration users build: oneDNN
# serves the CPU towers' sgemm, convolutions and bf16, and nothing needs
# OpenBLAS then; the runner checks bf16 on the GPU machine's own CPU, which
# may have AMX where ours has not). The copy is kept with its files' times, so a
# second run rebuilds only what changed (about 20 s; the first 3-8 min on 2
# busy cores). The baseline's build is a copy of that build directory in
# $BUILD-baseline (copied again when configure's arguments change), into
# which REF's files (git archive) are copied where they differ, so that
# only what REF changed is compiled again. Exit status 0 with the kit's
# size on the last line; 77 when this machine cannot build the CUDA backend
# (no nvcc, cuBLAS, cuDNN 9, NCCL); 1 on any other failure, with the reason.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
KIT=${1:-$SRC/.gpu-kit}
BUILD=${TT_KIT_BUILD:-$SRC/.gpu-kit-build}
JOBS=${TT_KIT_JOBS:-2}
FMNIST=${TT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
CONFIGURE_ARGS="--without-mpi --with-dnnl --with-cuda"
die() { echo "kit.sh: $*" >&2; exit 1; }

[ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null 2>&1 || {
  echo "kit.sh: no nvcc here: the kit needs the CUDA backend"; exit 77; }
[ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $FMNIST (apt-get install dataset-fashion-mnist, or set TT_FASHION_MNIST)"

# ---- 1. the source copy: tracked and untracked-not-ignored files, and
# autotools' output when the tree has it (no autoreconf then) ----
mkdir -p "$BUILD" "$(dirname "$KIT")" || die "cannot create $BUILD"
# both absolute: the steps below run in other directories
BUILD=$(cd "$BUILD" && pwd) && KIT=$(cd "$(dirname "$KIT")" && pwd)/$(basename "$KIT") || exit 1
git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1 ||
  die "$SRC is not a git checkout: configure a copy $CONFIGURE_ARGS by hand"
(cd "$SRC" && { git ls-files --cached --others --exclude-standard &&
   ls configure Makefile.in aclocal.m4 config.h.in 2>/dev/null; find build-aux -type f 2>/dev/null; } |
   while IFS= read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done) >"$BUILD/.kit-files" ||
  die "listing the sources failed"
# Only the files whose content differs are copied, and they get the time of
# the copy: make then rebuilds exactly what changed since the last copy. (The
# source's own times would not do: a file changed while an earlier kit was
# being built is older than the object compiled from its previous content.)
# Files that vanished stay behind; the build names its sources, so a stale
# one is never compiled.
# sync_into DIR: the files DIR/.kit-files names, from DIR/.kit-incoming
sync_into() {
  (cd "$1/.kit-incoming" && while IFS= read -r f; do
     cmp -s "$f" "$1/$f" && continue
     mkdir -p "$1/$(dirname "$f")" && cp "$f" "$1/$f" || exit 1
   done <"$1/.kit-files") && rm -rf "$1/.kit-incoming"
}
rm -rf "$BUILD/.kit-incoming" && mkdir "$BUILD/.kit-incoming" &&
  (cd "$SRC" && tar -cf - -T "$BUILD/.kit-files") | (cd "$BUILD/.kit-incoming" && tar -xmf -) &&
  sync_into "$BUILD" || die "copying the sources into $BUILD failed"
cd "$BUILD" || exit 1
if [ ! -x configure ]; then
  autoreconf -fi >autoreconf.log 2>&1 || die "autoreconf failed (see $BUILD/autoreconf.log)"
fi
# configure again only when its arguments or configure itself changed
if [ ! -f config.status ] || [ "$(cat .kit-configure 2>/dev/null)" != "$CONFIGURE_ARGS" ] ||
   [ configure -nt config.status ]; then
  rm -f config.status
  # shellcheck disable=SC2086
  ./configure -q $CONFIGURE_ARGS >configure.out 2>&1 || {
    if grep -q 'not found under' configure.out; then
      echo "kit.sh: this machine cannot build the CUDA backend: $(grep 'not found under' configure.out)"; exit 77
    fi
    die "configure failed (see $BUILD/configure.out)"; }
  echo "$CONFIGURE_ARGS" >.kit-configure
fi
grep -q '^#define HAVE_CUDA 1' config.h || { echo "kit.sh: configure built no CUDA backend"; exit 77; }

# ---- 2. the binaries, with an RPATH to the kit's lib/ (DT_RPATH, not
# RUNPATH: it serves the libraries' own dependencies too, e.g. oneDNN's
# libgomp). make sees \$$ORIGIN, the shell \$ORIGIN, the linker $ORIGIN.
PROGS="towertrain tests/test_cuda_libs tests/test_precision tests/gpu/test_gpu_ops tests/gpu/test_gpu_precision tests/test_bf16 bench/gpu/convbench"
# shellcheck disable=SC2086
nice make -j"$JOBS" $PROGS tests/tt_cpuid LDFLAGS='-Wl,--disable-new-dtags -Wl,-rpath,\$$ORIGIN/../lib' >make.out 2>&1 ||
  die "make failed (see $BUILD/make.out)"

# bench/timeline's event_cost (one timing event's cost on the GPU), against
# the same static cudart
cuda_cflags=$(sed -n 's/^CUDA_CFLAGS = //p' Makefile) && cuda_libs=$(sed -n 's/^CUDA_LIBS = //p' Makefile) &&
  # shellcheck disable=SC2086
  cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L $cuda_cflags "$SRC/bench/timeline/event_cost.c" \
    $cuda_libs -o event_cost >>make.out 2>&1 || die "building event_cost failed (see $BUILD/make.out)"
# and cupti_cost (what CUPTI's kernel records would cost a step instead),
# a kernel of its own: nvcc, the build's architectures
# (about 15 s: only when its source is newer)
if [ ! -x cupti_cost ] || [ "$SRC/bench/timeline/cupti_cost.cu" -nt cupti_cost ] ||
   [ "$SRC/bench/timeline/probe.h" -nt cupti_cost ]; then
  nvcc=$(sed -n 's/^NVCC = //p' Makefile) && arch=$(sed -n 's/^NVCC_ARCHFLAGS = //p' Makefile) &&
    # shellcheck disable=SC2086
    "$nvcc" -O2 -std=c++17 $arch "$SRC/bench/timeline/cupti_cost.cu" -o cupti_cost -ldl >>make.out 2>&1 ||
    die "building cupti_cost failed (see $BUILD/make.out)"
fi

# the baseline: towertrain at TT_KIT_BASELINE, in a copy of this build
# directory that takes REF's files where they differ (sync_into above)
BASE_REF=${TT_KIT_BASELINE:-}
if [ -n "$BASE_REF" ]; then
  BASE_SHA=$(git -C "$SRC" rev-parse --short "$BASE_REF^{commit}" 2>/dev/null) ||
    die "TT_KIT_BASELINE=$BASE_REF is no commit of $SRC"
  BASE_BUILD=$BUILD-baseline
  # configured as this build is, or copied from it again
  if [ ! -f "$BASE_BUILD/config.status" ] || ! cmp -s .kit-configure "$BASE_BUILD/.kit-configure"; then
    rm -rf "$BASE_BUILD" && cp -a "$BUILD" "$BASE_BUILD" || die "cannot copy $BUILD to $BASE_BUILD"
  fi
  rm -rf "$BASE_BUILD/.kit-incoming" && mkdir "$BASE_BUILD/.kit-incoming" &&
    git -C "$SRC" archive --format=tar "$BASE_SHA" | (cd "$BASE_BUILD/.kit-incoming" && tar -xmf -) &&
    (cd "$BASE_BUILD/.kit-incoming" && find . -type f | sed 's|^\./||') >"$BASE_BUILD/.kit-files" &&
    sync_into "$BASE_BUILD" || die "copying $BASE_REF's files into $BASE_BUILD failed"
  (cd "$BASE_BUILD" && nice make -j"$JOBS" towertrain \
     LDFLAGS='-Wl,--disable-new-dtags -Wl,-rpath,\$$ORIGIN/../lib' >make.out 2>&1) ||
    die "make of the baseline ($BASE_REF) failed (see $BASE_BUILD/make.out)"
fi

# ---- 3. the kit, assembled afresh into a temporary folder, then renamed ----
tmp="$KIT.new"
rm -rf "$tmp" && mkdir -p "$tmp/bin" "$tmp/libexec" "$tmp/lib" "$tmp/tests" "$tmp/src/tests/gpu" "$tmp/src/bench/gpu" \
  "$tmp/src/bench/timeline" "$tmp/src/bench/roofline" "$tmp/src/models" "$tmp/src/jobs" "$tmp/data/fashion-mnist" || die "cannot create $tmp"
for p in $PROGS event_cost cupti_cost; do
  # debug info is most of their size; towertrain keeps its symbols for
  # backtraces and profiles, the test programs (which name their checks)
  # drop them too, to stay within the 58 MiB
  how=--strip-unneeded
  [ "${p##*/}" = towertrain ] && how=--strip-debug
  strip $how -o "$tmp/libexec/${p##*/}" "$p" || die "strip $p failed"
done
# the CPU features e2e_precision.sh derives its expectations from
# (tt_lib.sh's tt_cpu_has runs $TT_BUILDDIR/tests/tt_cpuid; the kit is TT_BUILDDIR)
cp tests/tt_cpuid "$tmp/tests/" || die "copying tests/tt_cpuid failed"
if [ -n "$BASE_REF" ]; then
  strip --strip-debug -o "$tmp/libexec/towertrain-baseline" "$BASE_BUILD/towertrain" &&
    cp "$SRC/tests/gpu/kit_towertrain.sh" "$tmp/bin/towertrain-baseline" &&
    chmod +x "$tmp/bin/towertrain-baseline" || die "copying the baseline failed"
fi
# the libraries, as the loader resolves them for these binaries here
for p in "$tmp"/libexec/*; do ldd "$p"; done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
  while read -r name path; do
    case $name in
      libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*|libutil.so.*|libresolv.so.*) ;;
      *) cp -L "$path" "$tmp/lib/$name" || exit 1 ;;
    esac
  done || die "copying the shared libraries failed"
# oneDNN is 40 MB, and xz packs it into 7: the kit's libraries over 4 MB
# travel packed and env.sh's kit_unpack restores them on first use. Packing
# takes ~15 s, so the result is kept in the build directory for the same file.
mkdir -p "$BUILD/.kit-packed"
for f in "$tmp"/lib/*; do
  [ "$(stat -c %s "$f")" -gt 4194304 ] || continue
  name=${f##*/}
  key=$(sha256sum "$f" | cut -c1-64)
  if [ "$(cat "$BUILD/.kit-packed/$name.key" 2>/dev/null)" != "$key" ]; then
    if command -v xz >/dev/null 2>&1; then
      xz -9 -T2 -c "$f" >"$BUILD/.kit-packed/$name.xz"
    else
      /usr/bin/python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.compress(open(sys.argv[1], "rb").read(), preset=9))' \
        "$f" "$BUILD/.kit-packed/$name.xz"
    fi && echo "$key" >"$BUILD/.kit-packed/$name.key" || die "packing $name with xz failed"
  fi
  cp "$BUILD/.kit-packed/$name.xz" "$f.xz" && rm -f "$f" || die "packing $name failed"
done
# the names of the NVIDIA libraries towertrain opens (cuda_libs.c), read off
# the binary so that the runner looks for exactly these
strings "$tmp/libexec/towertrain" | grep -E '^lib(cublas|cudnn|nccl)\.so\.[0-9]+$' | sort -u >"$tmp/nvlibs.txt"
[ "$(wc -l <"$tmp/nvlibs.txt")" = 3 ] || die "towertrain names no cuBLAS/cuDNN/NCCL sonames ($(tr '\n' ' ' <"$tmp/nvlibs.txt"))"
# cupti_cost opens CUPTI of the same CUDA major as cuBLAS
sed -n 's/^libcublas\.so\.\([0-9]*\)$/libcupti.so.\1/p' "$tmp/nvlibs.txt" >"$tmp/cupti.txt"

cp "$SRC/tests/gpu/kit_run.sh" "$tmp/run" && cp "$SRC/tests/gpu/kit_env.sh" "$tmp/env.sh" &&
  cp "$SRC/tests/gpu/kit_towertrain.sh" "$tmp/bin/towertrain" &&
  cp "$SRC/tests/tt_lib.sh" "$SRC/tests/tt_safetensors.py" "$SRC/tests/tt_tap.py" \
    "$SRC/tests/tt_timeline.py" "$SRC/tests/tt_profile.py" "$tmp/src/tests/" &&
  cp "$SRC"/tests/gpu/e2e_gpu*.sh "$tmp/src/tests/gpu/" && cp "$SRC/tests/e2e_precision.sh" "$tmp/src/tests/" &&
  cp "$SRC"/models/*.cfg "$tmp/src/models/" && cp "$SRC"/jobs/*.cfg "$tmp/src/jobs/" &&
  cp "$SRC/bench/gpu/run" "$SRC/bench/gpu/conv_torch.py" "$tmp/src/bench/gpu/" && cp "$SRC/bench/tt_models.py" "$tmp/src/bench/" &&
  cp "$SRC/bench/timeline/run" "$tmp/src/bench/timeline/" &&
  cp "$SRC/bench/roofline/bf16_ratio" "$tmp/src/bench/roofline/" ||
  die "copying the scripts failed"
chmod +x "$tmp/run" "$tmp/bin/towertrain" "$tmp"/src/tests/gpu/*.sh "$tmp/src/bench/gpu/run" \
  "$tmp/src/bench/timeline/run" "$tmp/src/bench/roofline/bf16_ratio"

# the data: all of Fashion-MNIST (26 + 4 MB gzip): e2e_gpu_precision.sh's
# margins were set on all 60,000 training images; TT_KIT_TRAIN=N keeps the
# first N (e2e_gpu.sh needs 12,000) when the kit must be smaller
TRAIN=${TT_KIT_TRAIN:-60000}
/usr/bin/python3 - "$FMNIST" "$tmp/data/fashion-mnist" "$TRAIN" <<'PYEOF' || die "writing the data failed"
import gzip, shutil, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for kind, rec in (("images-idx3", 784), ("labels-idx1", 1)):
    shutil.copyfile("%s/t10k-%s-ubyte.gz" % (src, kind), "%s/t10k-%s-ubyte.gz" % (dst, kind))
    with gzip.open("%s/train-%s-ubyte.gz" % (src, kind)) as f:
        head = bytearray(f.read(16 if rec > 1 else 8))
        if struct.unpack(">I", head[4:8])[0] == n:
            shutil.copyfile(f.name, "%s/train-%s-ubyte.gz" % (dst, kind))
            continue
        body = f.read(n * rec)
    assert len(body) == n * rec, "fewer than %d samples" % n
    struct.pack_into(">I", head, 4, n)
    with gzip.GzipFile("%s/train-%s-ubyte.gz" % (dst, kind), "wb", compresslevel=9, mtime=0) as f:
        f.write(bytes(head) + body)
PYEOF

{
  echo "towertrain GPU kit, built $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m)"
  echo "source: $(git -C "$SRC" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "configure $CONFIGURE_ARGS"
  [ -z "$BASE_REF" ] || echo "baseline: $BASE_REF ($BASE_SHA): libexec/towertrain-baseline"
  sed -n 's/^cuda: /cuda: /p' <<EOF
$("$tmp/libexec/towertrain" --version 2>/dev/null)
EOF
  echo "libraries: $(cd "$tmp/lib" && ls | tr '\n' ' ')"
} >"$tmp/BUILD"

rm -rf "$KIT" && mv "$tmp" "$KIT" || die "cannot move the kit to $KIT"
size=$(du -sm "$KIT" | cut -f1)
# the device tool carries 64 MiB with the working tree (about 2.5 MB)
[ "$size" -le 58 ] || die "the kit is $size MiB, over 58 MiB"
echo "kit.sh: $KIT: $size MiB"
