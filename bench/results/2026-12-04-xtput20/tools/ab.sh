#!/bin/sh
H=$(cd "$(dirname "$0")" && pwd)   # this directory: the scripts call each other here
# usage: ab.sh TAG N BUILD_A BUILD_B : N interleaved pairs, A then B (order swapped every pair)
T=$1; N=$2; A=$3; B=$4
D=${OUT:-/tmp/xtput20}/ab-$T; mkdir -p $D
for i in $(seq ${S:-1} $N); do
  if [ $((i % 2)) -eq 1 ]; then L="a b"; else L="b a"; fi
  for w in $L; do
    if [ $w = a ]; then X=$A; else X=$B; fi
    nice -n 19 $X/bench/shoal-bench-net --short --only tput --contenders shoal-bridge,shoal-bridge-direct,zeromq > $D/$w-$i.md 2>$D/$w-$i.err
  done
done
python3 "$H"/abrep.py $D
