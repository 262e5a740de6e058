#!/bin/bash
# idle.sh TREE RATE SECONDS -> CPU seconds of each host's bridge and of all processes, over SECONDS
tree=$1; rate=$2; secs=$3
y=/tmp/bs19/idle-$rate.yaml
sed -e "s#program: fanout#program: /work/$tree/build/examples/fanout#" -e "s/\"20000\"/\"$rate\"/" \
    -e 's/7411/7481/; s/7412/7482/; s/system: fanout-hosts/system: bs19-idle/' /work/wt-bridgespin19/examples/hosts.yaml > $y
mkdir -m 700 -p /dev/shm/bs19-a /dev/shm/bs19-b
SHOAL_SHM_DIR=/dev/shm/bs19-b nice -n 19 /work/$tree/build/tools/shoal run --host b $y > /tmp/bs19/idle-b.log 2>&1 & pb=$!
SHOAL_SHM_DIR=/dev/shm/bs19-a nice -n 19 /work/$tree/build/tools/shoal run --host a $y > /tmp/bs19/idle-a.log 2>&1 & pa=$!
sleep 3
ticks() { local t=0; for p in "$@"; do [ -r /proc/$p/stat ] && t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }
# threads included: /proc/PID/stat counts the whole process
ba=$(pgrep -P $pa -f "shoal bridge"); bb=$(pgrep -P $pb -f "shoal bridge")
all="$pa $pb $(pgrep -P $pa) $(pgrep -P $pb)"
a0=$(ticks $ba); b0=$(ticks $bb); t0=$(ticks $all)
sleep $secs; [ -n "$THREADS" ] && for p in $ba $bb; do for t in /proc/$p/task/*; do echo "$p $(basename $t) $(awk "{print \$14+\$15}" $t/stat) $(cat $t/comm)"; done; done; [ -n "$THREADS" ] && top -b -n1 | head -15
a1=$(ticks $ba); b1=$(ticks $bb); t1=$(ticks $all)
hz=$(getconf CLK_TCK)
echo "$tree rate $rate: bridge a $(echo "scale=3; ($a1-$a0)/$hz/$secs" | bc) CPU, bridge b $(echo "scale=3; ($b1-$b0)/$hz/$secs" | bc) CPU, all $(echo "scale=3; ($t1-$t0)/$hz/$secs" | bc) CPU (load $(cut -d' ' -f1 /proc/loadavg))"
kill -TERM $pa $pb; wait $pa $pb 2>/dev/null
rmdir /dev/shm/bs19-a /dev/shm/bs19-b 2>/dev/null
