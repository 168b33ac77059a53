#!/bin/sh
# resize, center_crop, random_resized_crop and color_jitter against
# torchvision's functional transforms and a float64 re-implementation (TAP;
# tests/augment_check.py does the work).
. "$(dirname "$0")/tt_lib.sh"
if ! $PY -c 'import numpy' 2>/dev/null; then
  skip "augmentations against torchvision or a float64 reference" "python3-numpy not installed"
  tt_done
fi
$PY "$TT_SRCDIR/tests/augment_check.py" "$TT_BUILDDIR/tests/tt_augment" > "$T/checks" 2>&1
tt_tap "$T/checks" $?
tt_done
