#!/bin/sh
# The README's quick start, as a reader pastes it (TAP): its first command must
# work as root on a machine without sudo (containers) and go through sudo where
# sudo is there; it installs every package CI installs; and the README sends no
# reader outside the repository. The commands run against stubs of apt-get,
# autoreconf, configure, make and towertrain that record their arguments.
. "$(dirname "$0")/tt_lib.sh"

README=$TT_SRCDIR/README.md
# the two lines of the first sh block after "## Quick start"
awk '/^## Quick start/ {q = 1} q && /^```sh/ {b = 1; next} b && /^```/ {exit} b {print}' \
  "$README" > "$T/quick"
[ "$(grep -c . "$T/quick")" = 2 ]
ok $? "the quick start is exactly two commands"
install_cmd=$(sed -n 1p "$T/quick")
test_cmd=$(sed -n 2p "$T/quick")
[ "$test_cmd" = "make check" ]
ok $? "the second command runs the tests (make check)"

# stubs: each records "name args" in $T/calls
mkdir -p "$T/bin" "$T/src"
for tool in apt-get autoreconf make; do
  printf '#!/bin/sh\necho "%s $*" >> "%s/calls"\n' "$tool" "$T" > "$T/bin/$tool"
done
printf '#!/bin/sh\necho "sudo $*" >> "%s/calls"\nexec "$@"\n' "$T" > "$T/sudo"
for tool in configure towertrain; do
  printf '#!/bin/sh\necho "./%s $*" >> "%s/calls"\n' "$tool" "$T" > "$T/src/$tool"
done
chmod +x "$T/bin/"* "$T/sudo" "$T/src/"*
# the shell's own utilities, without any sudo the machine may have
mkdir -p "$T/sys"
for u in sh env cat grep sed; do ln -s "$(command -v $u)" "$T/sys/$u"; done

# (a) root in a container: no sudo on PATH
(cd "$T/src" && PATH="$T/bin:$T/sys" sh -c "$install_cmd") > "$T/out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "^apt-get update" "$T/calls" && grep -q "^apt-get install -y " "$T/calls" &&
  grep -q "^./towertrain run jobs/fashion_mnist_lenet.cfg" "$T/calls" && ! grep -q "^sudo" "$T/calls"
ok $? "without sudo (root in a container): apt-get runs directly and the job runs (rc $rc: $(cat "$T/out"))"

# (b) a user with sudo: apt-get goes through sudo
rm -f "$T/calls"
cp "$T/sudo" "$T/bin/sudo"
(cd "$T/src" && PATH="$T/bin:$T/sys" sh -c "$install_cmd") > "$T/out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "^sudo apt-get update" "$T/calls" && grep -q "^sudo apt-get install -y " "$T/calls" &&
  [ "$(grep -c '^sudo' "$T/calls")" = 2 ] && grep -q "^./towertrain run" "$T/calls"
ok $? "with sudo: both apt-get calls go through sudo, nothing else does (rc $rc)"

# every package CI installs is in the quick start's apt-get line
ci_packages=$(sed -n '/^PACKAGES="/,/"/p' "$TT_SRCDIR/.ci/run" | sed 's/PACKAGES="//; s/"//' | tr -s ' \n' '\n' | grep .)
installed=$(grep "^apt-get install" "$T/calls" | sed 's/^apt-get install -y //' | tr ' ' '\n')
missing=""
for p in $ci_packages; do
  printf '%s\n' "$installed" | grep -qx "$p" || missing="$missing $p"
done
[ -n "$ci_packages" ] && [ -z "$missing" ]
ok $? "the quick start installs every package .ci/run installs (missing:${missing:- none})"

# nothing outside the repository: no ../ paths, no shared/ contract
! grep -nE '\.\./|shared/SPEC' "$README"
ok $? "the README points at nothing outside the repository"

tt_done
