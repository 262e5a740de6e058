#!/bin/sh
# usage: sys.sh N dirA dirB ... : alternate shoal-bench-system backlog/streaming, print steady rows
n=$1; shift
for i in $(seq 1 $n); do
  for b in "$@"; do
    out=$($b/build/bench/shoal-bench-system --short --groups 1,100 --only dispatch,backlog --modes indexed --runs 3 2>/dev/null)
    echo "$out" | awk -v b="$b" '/^### Dispatcher alone, streaming/{s="stream"} /^### Dispatcher alone, from a backlog/{s="backlog"} /^\| [0-9]+ \| 64 \| steady/{split($0,f,"|"); printf "%s %s g=%s disp=%s fwd=%s ratio=%s probe=%s\n", b, s, f[2], f[5], f[9], f[12], f[14]}'
  done
done
