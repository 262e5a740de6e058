#!/bin/bash
# cpu.sh TAG ROUNDS KIND(rtt|tput) config...
tag=$1; rounds=$2; kind=$3; shift 3
if [ $kind = rtt ]; then args="--short --only rtt"; else args="--short --only tput"; fi
for r in $(seq 1 $rounds); do
  for c in "$@"; do
    IFS=: read name tree bus rus <<<"$c"
    f=/tmp/bs19/$tag-$kind-$name-$r.txt
    echo "load $(cut -d' ' -f1-3 /proc/loadavg)" > $f
    SHOAL_BRIDGE_SPIN_US=$bus SHOAL_REQUEST_SPIN_US=$rus perf stat -x, -e task-clock,context-switches -o $f.perf nice -n 19 /work/$tree/build/bench/shoal-bench-net $args --contenders shoal-bridge >> $f 2>&1
    tc=$(grep task-clock $f.perf | cut -d, -f1); cs=$(grep context-sw $f.perf | cut -d, -f1)
    echo "$r $name $(head -1 $f) task-clock ${tc}ms cpus $(grep task-clock $f.perf | cut -d, -f6) cs $cs $(grep -h '^| shoal-bridge' $f | awk -F'|' '{printf "%s %s %s; ", $3,$4,$6}')"
  done
done
