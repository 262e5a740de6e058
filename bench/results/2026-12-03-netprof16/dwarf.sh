#!/bin/bash
# Run as root from the worktree's top: dwarf.sh RESULTS_DIR
# One run of the bridge's throughput; 0.4 s after each sample's bridge A
# process appears (64 B, then 1 KiB), record it with DWARF call chains for
# 0.4 s into /tmp/np16/bridgeA-dwarf-N.perf.data.
R=$1
mkdir -p /tmp/np16
build/bench/shoal-bench-net --runs 1 --only tput --contenders shoal-bridge > /dev/null 2> $R/bridgeA-dwarf.stderr &
B=$!
seen=""
n=0
while kill -0 $B 2>/dev/null; do
	pid=$(pgrep -f "shoal bridge --host a" | head -1)
	if [ -n "$pid" ] && ! echo "$seen" | grep -qw "$pid"; then
		seen="$seen $pid"
		n=$((n+1))
		sleep 0.4
		perf record -p $pid --call-graph dwarf,16384 -F 2000 -o /tmp/np16/bridgeA-dwarf-$n.perf.data -- sleep 0.4 2>/dev/null
	fi
	sleep 0.05
done
wait $B
