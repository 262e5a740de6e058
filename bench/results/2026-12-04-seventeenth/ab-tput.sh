#!/bin/sh
# usage: tput.sh N dirA dirB ...: alternate shoal-bench-system tput (1,100 groups, indexed), print routed rows' medians
n=$1; shift
for i in $(seq 1 $n); do
  for b in "$@"; do
    $b/build/bench/shoal-bench-system --short --groups 1,100 --only tput --modes indexed --runs 3 2>/dev/null |
      awk -v b="$b" -F'|' '/^\| (1|100) \| 64 \| (routed|plain) \| (send|try_send) /{gsub(/ +/," "); printf "%s g=%s %s %s ns/call=%s deliv=%s disp=%s probe=%s\n", b, $2, $4, $5, $7, $10, $9, $12}'
  done
done
