#!/bin/sh
H=$(cd "$(dirname "$0")" && pwd)   # this directory: the scripts call each other here
# usage: run_sampled.sh BUILD OUTPREFIX [contenders]
B=$1; O=$2; C=${3:-shoal-bridge}
nice -n 19 $B/bench/shoal-bench-net ${RUNS:---short} --only tput --contenders $C --csv $O.csv > $O.md 2>$O.err &
P=$!
nice -n 19 python3 "$H"/sampler.py $P $O.samp
wait $P
