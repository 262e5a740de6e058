#!/bin/bash
# net.sh KIND TAG ROUNDS NAME:TREE:BRIDGE_US:REQUEST_US...   KIND: rtt or tput
# (the _US variables were read only by the experiment's build)
kind=$1; tag=$2; rounds=$3; shift 3
if [ "$kind" = rtt ]; then args="--short --only rtt --contenders shoal-bridge,ucx"
else args="--runs 3 --only tput --contenders shoal-bridge,zeromq"; fi
for r in $(seq 1 "$rounds"); do
  for c in "$@"; do
    IFS=: read -r name tree bus rus <<<"$c"
    f=/tmp/bs19/$tag-$name-$r.txt
    echo "load $(cut -d' ' -f1-3 /proc/loadavg)" > "$f"
    SHOAL_BRIDGE_SPIN_US=$bus SHOAL_REQUEST_SPIN_US=$rus nice -n 19 \
      "/work/$tree/build/bench/shoal-bench-net" $args >> "$f" 2>&1
    echo "$r $name $(grep -h '^| shoal-bridge\|^| ucx\|^| zeromq' "$f" | tr -s ' ')"
  done
done
