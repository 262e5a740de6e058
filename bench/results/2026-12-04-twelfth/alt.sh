#!/bin/sh
# alt.sh N bin1 bin2 ...: N rounds, each binary's pingpong p50 rows with the probe
n=$1; shift
for i in $(seq 1 $n); do
  for b in "$@"; do
    ./$b-iceoryx --short --only pingpong 2>/dev/null | awk -v b=$b -v i=$i -F'|' '/^\| (shoal-direct|shoal-request|plain) / && NF > 8 {gsub(/ +/," "); print i, b, $2, $3, "probe", $9}'
  done
done
