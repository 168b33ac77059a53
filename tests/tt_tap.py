"""tt_tap.py - the TAP lines of the python checks, which tt_lib.sh's tt_tap
counts in: ok(cond, what) prints "ok - what" or "not ok - what", skip(what,
why) a visible SKIP, done() exits 1 when a check failed. Flushed line by line,
so the lines keep their place among what subprocesses print."""
import sys

failed = 0


def ok(cond, what):
    global failed
    failed += 0 if cond else 1
    print(("ok - %s" if cond else "not ok - %s") % what, flush=True)
    return bool(cond)


def skip(what, why):
    print("ok - %s # SKIP %s" % (what, why), flush=True)


def done():
    sys.exit(1 if failed else 0)
