#!/bin/sh
H=$(cd "$(dirname "$0")" && pwd)   # this directory: the scripts call each other here
# usage: abcpu.sh TAG N BUILD_A BUILD_B : N interleaved pairs of sampled shoal-bridge-only runs
T=$1; N=$2; A=$3; B=$4
D=${OUT:-/tmp/xtput20}/abc-$T; mkdir -p $D
for i in $(seq ${S:-1} $N); do
  if [ $((i % 2)) -eq 1 ]; then L="a b"; else L="b a"; fi
  for w in $L; do
    if [ $w = a ]; then X=$A; else X=$B; fi
    "$H"/run_sampled.sh $X $D/$w-$i ${C:-shoal-bridge}
    rm -f $D/$w-$i.samp.win
    python3 "$H"/analyze.py $D/$w-$i.samp $D/$w-$i.csv > $D/$w-$i.an
  done
done
python3 "$H"/abcpurep.py $D
