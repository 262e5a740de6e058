#!/bin/sh
H=$(cd "$(dirname "$0")" && pwd)   # this directory: the scripts call each other here
# usage: run_perf.sh BUILD OUTPREFIX
B=$1; O=$2
nice -n 19 perf record -e cpu-clock -F 2000 -k CLOCK_MONOTONIC -a -g -o $O.data -- nice -n 19 $B/bench/shoal-bench-net ${RUNS:---short} --only tput --contenders shoal-bridge --csv $O.csv > $O.md 2>$O.err &
P=""
while [ -z "$P" ]; do sleep 0.05; P=$(pgrep -f -n "^$B/bench/shoal-bench-net --short"); done
nice -n 19 python3 "$H"/sampler.py $P $O.samp
wait
