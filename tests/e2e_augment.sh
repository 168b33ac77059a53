#!/bin/sh
# resize, center_crop, random_resized_crop and color_jitter against
# torchvision's functional transforms and a float64 re-implementation (TAP;
# tests/augment_check.py does the work).
: "${TT_SRCDIR:?}" "${TT_BUILDDIR:?}"
PY=/usr/bin/python3
if ! $PY -c 'import numpy' 2>/dev/null; then
  echo "ok 1 - augmentations against torchvision or a float64 reference # SKIP python3-numpy not installed"
  echo "1..1"
  exit 0
fi
exec $PY "$TT_SRCDIR/tests/augment_check.py" "$TT_BUILDDIR/tests/tt_augment"
