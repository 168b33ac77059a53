#!/bin/sh
# e2e_cpu_threads.sh - the default trainer.threads_per_tower of CPU towers
# (TAP): the online CPUs shared by the towers, and no more than the towers'
# share of the CPUs the process may run on (its affinity mask: taskset, a
# container's cpuset, mpirun --bind-to core), at least 1. Before, a process
# held to one CPU by taskset still ran a team of one thread per online CPU.
# What each run must get is derived from this machine (getconf for the
# online CPUs, /proc/self/status for the mask), for 1 and 2 towers, with
# this shell's mask and with taskset holding the process to one CPU.
. "$(dirname "$0")/tt_lib.sh"

if ! command -v taskset >/dev/null; then
  tt_skip_all "no taskset (util-linux)" \
    "1 tower(s), this shell's CPUs: the default threads" \
    "1 tower(s), taskset to one CPU: the default threads" \
    "2 tower(s), this shell's CPUs: the default threads" \
    "2 tower(s), taskset to one CPU: the default threads"
fi

online=$(getconf _NPROCESSORS_ONLN)
mask=$(awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status)
allowed=$(nproc)
first=$(echo "$mask" | sed 's/[-,].*//')

tt_job "$T/job.cfg" steps=2 callbacks='( )' \
  trainer='type = "sync_replicated"; device = "cpu"; nr_tower = 1;' \
  layers='{ name = "fc"; type = "dense"; units = 4; }'

# want TOWERS ALLOWED: online / towers, at most ALLOWED / towers, at least 1
want() {
  w=$((online / $1))
  [ $(($2 / $1)) -lt $w ] && w=$(($2 / $1))
  [ $w -lt 1 ] && w=1
  echo $w
}
# threads LOG: the threads column of every tower in the log's table
threads() {
  awk '$2 ~ /^cpu:[0-9]+$/ && $3 ~ /^[0-9]+$/ { printf "%s ", $3 }' "$1"
}

for towers in 1 2; do
  for how in mask one; do
    rm -rf "$T/log"
    if [ $how = mask ]; then
      "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/log" --quiet --set trainer.nr_tower=$towers
      rc=$? w=$(want $towers "$allowed") what="this shell's CPUs ($mask)"
    else
      taskset -c "$first" "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/log" --quiet \
        --set trainer.nr_tower=$towers
      rc=$? w=$(want $towers 1) what="taskset to one CPU ($first)"
    fi
    got=$(threads "$T/log/log.log")
    expect=$(for t in $(seq $towers); do printf "%s " $w; done)
    [ $rc = 0 ] && [ "$got" = "$expect" ]
    ok $? "$towers tower(s), $what: the default threads $expect(got '$got'; $online online)"
  done
done
tt_done
