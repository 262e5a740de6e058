#!/bin/sh
H=$(cd "$(dirname "$0")" && pwd)   # this directory: the scripts call each other here
# usage: run_sys.sh BUILD OUTPREFIX : syscalls and context switches of every process, plus the sampler
B=$1; O=$2
nice -n 19 perf record -e raw_syscalls:sys_enter -e sched:sched_switch -k CLOCK_MONOTONIC -a -o $O.data 2>/dev/null &
R=$!
sleep 1
"$H"/run_sampled.sh $B $O ${C:-shoal-bridge}
kill -INT $R; wait $R
rm -f $O.samp.win
python3 "$H"/analyze.py $O.samp $O.csv > $O.an
perf script -i $O.data -F pid,tid,time,event,trace 2>/dev/null > $O.sys
