#!/bin/sh
# usage: net.sh N dirA dirB ...: alternate shoal-bench-net tput (bridge rows and ZeroMQ), 2 runs each
n=$1; shift
for i in $(seq 1 $n); do
  for b in "$@"; do
    $b/build/bench/shoal-bench-net --runs 2 --only tput --contenders ${NET_CONTENDERS:-shoal-bridge-direct,shoal-bridge,zeromq} 2>/dev/null |
      awk -v b="$b" -F'|' '/^\| (shoal|zeromq)/{gsub(/ +/," "); printf "%s %s %s msg/s=%s probe=%s\n", b, $2, $3, $4, $8}'
  done
done
