#!/bin/sh
# tt_venv.sh - the Python the tests that need PyPI's readers run: a virtual
# environment with TensorBoard, safetensors and numpy (pinned below), made
# on first use and reused after, outside the tree:
#   $TT_TEST_VENV, default ${XDG_CACHE_HOME:-$HOME/.cache}/towertrain-test-venv.
# Prints the venv's python on stdout and exits 0; where it cannot be made
# (no PyPI, no python3-venv) prints why on stdout and exits 1, so that the
# test says SKIP with the reason. .ci/run calls it once before make check;
# two tests calling it at once take turns (flock).
PACKAGES="tensorboard==2.21.0 safetensors==0.8.0 numpy==2.4.6"
venv=${TT_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/towertrain-test-venv}
py=$venv/bin/python
have() {
  [ -x "$py" ] && "$py" -c "import tensorboard, safetensors, numpy" 2>/dev/null
}
if have; then echo "$py"; exit 0; fi
mkdir -p "$(dirname "$venv")" || { echo "cannot make $(dirname "$venv")"; exit 1; }
exec 9>"$venv.lock"
flock 9 2>/dev/null  # the other test may be making it now
if have; then echo "$py"; exit 0; fi
log=$venv.log
if ! /usr/bin/python3 -m venv --clear "$venv" >"$log" 2>&1; then
  echo "python3 -m venv failed (python3-venv not installed?): $(tail -1 "$log")"
  exit 1
fi
# bounded: where PyPI is unreachable pip retries; give up after 10 minutes
if ! timeout 600 "$py" -m pip install -q --retries 1 --timeout 30 $PACKAGES >>"$log" 2>&1; then
  echo "pip install $PACKAGES failed (PyPI unreachable?): $(tail -1 "$log")"
  rm -rf "$venv"
  exit 1
fi
have || { echo "the venv $venv does not import tensorboard, safetensors and numpy"; exit 1; }
echo "$py"
