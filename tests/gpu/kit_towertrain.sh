#!/bin/sh
# The GPU kit's bin/towertrain (from tests/gpu/kit_towertrain.sh): runs
# libexec/towertrain with the directories of cuBLAS, cuDNN and NCCL on the
# library path, for towertrain alone (python3 and PyTorch keep their own).
# As bin/towertrain-baseline it runs libexec/towertrain-baseline: the
# program of its own name.
# The kit's runner finds them once (TT_KIT_NVPATH); by hand, this does. It
# unpacks the kit's packed libraries first, where that is not done yet.
kit=$(cd "$(dirname "$0")/.." && pwd) || exit 1
. "$kit/env.sh"
kit_unpack "$kit" || exit 1
if [ -z "${TT_KIT_NVPATH+set}" ]; then
  nvlibs_find "$kit/nvlibs.txt"
  TT_KIT_NVPATH=$NVLIBS_PATH
fi
LD_LIBRARY_PATH=$TT_KIT_NVPATH${LD_LIBRARY_PATH:+${TT_KIT_NVPATH:+:}$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
# TT_EMULATOR (make check-cpus, tests/tt_lib.sh): run it as on that CPU
exec ${TT_EMULATOR:-} "$kit/libexec/${0##*/}" "$@"
