# kit_env.sh (the kit's env.sh) - what the GPU kit's runner and its
# bin/towertrain share (sourced): unpacking its large libraries, and where
# NVIDIA's libraries are on this machine.
#
#   kit_unpack KIT             lib/NAME.xz -> lib/NAME where NAME is missing
#                              (kit.sh packs oneDNN: 40 MB, 7 MB with xz, so
#                              that the kit travels within 58 MiB); atomic
#                              (a temporary file renamed), so runs started
#                              together never see half a library. Returns 1,
#                              with a line on stderr, when it cannot.
#   nvlibs_find SONAMES_FILE   SONAMES_FILE: one soname a line, those
#                              towertrain opens with dlopen (the kit's
#                              nvlibs.txt: libcublas.so.13, libcudnn.so.9,
#                              libnccl.so.2 for a CUDA 13 build)
# sets NVLIBS_PATH (the directories, ':'-separated, for LD_LIBRARY_PATH),
# NVLIBS_FILES (lines "soname path") and NVLIBS_MISSING (the sonames found
# nowhere). Each soname is taken from the first directory that has it:
#   1. the CUDA toolkit: $CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/lib64
#      (and targets/x86_64-linux/lib beside them); TT_KIT_CUDA="DIR..." names
#      other toolkit directories, TT_KIT_CUDA="" none (tests/gpu/e2e_kit.sh);
#   2. python3's pip packages: nvidia/*/lib in every directory of the
#      namespace package nvidia (PyTorch's cu13 wheels: nvidia/cu13/lib holds
#      cuBLAS, nvidia/cudnn/lib cuDNN 9, nvidia/nccl/lib NCCL 2);
#   3. the loader's cache (ldconfig -p): found without help.
# A soname is a file name the loader matches exactly: a library of another
# major version (libcublas.so.12) is not taken, and towertrain would say
# which one it could not load.
nvlibs_dirs() {
  for d in ${TT_KIT_CUDA-${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda}; do
    echo "$d/lib64"
    echo "$d/targets/x86_64-linux/lib"
  done
  py=$(command -v python3 2>/dev/null) || return 0
  "$py" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null | while IFS= read -r n; do
    for l in "$n"/*/lib; do [ -d "$l" ] && echo "$l"; done
  done
}

nvlibs_find() {
  NVLIBS_PATH= NVLIBS_FILES= NVLIBS_MISSING=
  nvlibs_all=$(nvlibs_dirs)
  while IFS= read -r so; do
    [ -n "$so" ] || continue
    hit=
    while IFS= read -r d; do
      if [ -n "$d" ] && [ -e "$d/$so" ]; then hit=$d; break; fi
    done <<NVEOF
$nvlibs_all
NVEOF
    if [ -n "$hit" ]; then
      case ":$NVLIBS_PATH:" in *":$hit:"*) ;; *) NVLIBS_PATH=${NVLIBS_PATH:+$NVLIBS_PATH:}$hit ;; esac
      NVLIBS_FILES="${NVLIBS_FILES}$so $hit/$so
"
    else
      cached=$(ldconfig -p 2>/dev/null | awk -v so="$so" '$1 == so { print $NF; exit }')
      if [ -n "$cached" ]; then
        NVLIBS_FILES="${NVLIBS_FILES}$so $cached
"
      else
        NVLIBS_MISSING="${NVLIBS_MISSING:+$NVLIBS_MISSING }$so"
      fi
    fi
  done <"$1"
}

kit_unpack() {
  for z in "$1"/lib/*.xz; do
    [ -f "$z" ] || continue
    lib=${z%.xz}
    [ -f "$lib" ] && continue
    if command -v xz >/dev/null 2>&1; then
      xz -dc "$z" >"$lib.tmp.$$" && mv -f "$lib.tmp.$$" "$lib"
    else
      python3 -c 'import lzma, os, sys
data = lzma.open(sys.argv[1]).read()
with open(sys.argv[2], "wb") as f:
    f.write(data)
os.replace(sys.argv[2], sys.argv[3])' "$z" "$lib.tmp.$$" "$lib"
    fi || { rm -f "$lib.tmp.$$"; echo "gpu kit: cannot unpack $z (needs xz or python3)" >&2; return 1; }
  done
}
