# SPDX-License-Identifier: MIT
#
# The plots of bench/run-suite, one per call, each written as PNG and SVG:
#
#   gnuplot -c bench/suite-plots.gp DATADIR PLOTDIR NOTE NAME SIZE1 SIZE2 CONTENDERS
#
# DATADIR holds the files run-suite derives from the benchmarks' CSV, one
# series each, lines "x median min max" (see run-suite, "data for the
# plots"). NAME is one of dispatch, sender, throughput, latency, idle, ring.
# NOTE goes under the title of the plots whose points oversubscribe the CPUs.
# Error bars span min to max over the runs; lines join the medians. Samples
# taken while other tasks held the CPUs (disturbed) are marked with a red
# ring, from DATADIR's sender-, tput-, lat- and ring-disturbed.dat ("x value"
# lines) when run-suite wrote any.

dat = ARG1
out = ARG2
note = ARG3
name = ARG4
s1 = ARG5
s2 = ARG6
contenders = ARG7

f(s) = dat . "/" . s . ".dat"

set datafile separator whitespace
set grid
set key outside right top
set border 3
set tics nomirror
set pointsize 0.8
set style line 1 lc rgb "#1f77b4" lw 2 pt 7
set style line 2 lc rgb "#ff7f0e" lw 2 pt 5
set style line 3 lc rgb "#2ca02c" lw 2 pt 9
set style line 4 lc rgb "#d62728" lw 2 pt 11
set style line 5 lc rgb "#9467bd" lw 2 pt 13
set style line 6 lc rgb "#8c564b" lw 2 pt 3
set style line 9 lc rgb "#d00000" lw 1 pt 6 ps 1.4

# Whether series NAME-disturbed has points to mark (an empty one is plotted
# with no title: gnuplot only warns that it has no points).
marked(n) = system("test -s '" . f(n . "-disturbed") . "' && echo 1 || echo 0") + 0

groups_axis = "set logscale x; set xrange [0.8:130]; set xtics (1, 2, 5, 10, 20, 30, 50, 75, 100); set xlabel 'consumer groups (one process each)'"

do for [t in "png svg"] {
	if (t eq "png") {
		set terminal pngcairo size 1100,640 font ",10" noenhanced
	} else {
		set terminal svg size 1100,640 font "sans,11" dynamic background "#ffffff" noenhanced
	}
	set output out . "/" . name . "." . t

	if (name eq "dispatch" || name eq "backlog") {
		@groups_axis
		if (name eq "dispatch") {
			set title "Dispatcher alone, streaming: CPU time per routed message (median, bars min-max)"
		} else {
			set title "Dispatcher alone, draining a held backlog: busy time per routed message (median, bars min-max)"
		}
		set ylabel "ns per message"
		set logscale y
		plot f(name . "-indexed-" . s1) u 1:2:3:4 w yerrorlines ls 1 t "indexed (Shoal) " . s1 . " B", \
		     f(name . "-flat-" . s1) u 1:2:3:4 w yerrorlines ls 2 t "flat scan " . s1 . " B", \
		     f(name . "-chain-" . s1) u 1:2:3:4 w yerrorlines ls 4 t "nested chain " . s1 . " B", \
		     f(name . "-indexed-" . s2) u 1:2:3:4 w yerrorlines ls 1 dt 2 t "indexed " . s2 . " B", \
		     f(name . "-flat-" . s2) u 1:2:3:4 w yerrorlines ls 2 dt 2 t "flat " . s2 . " B", \
		     f(name . "-chain-" . s2) u 1:2:3:4 w yerrorlines ls 4 dt 2 t "chain " . s2 . " B"
	}
	if (name eq "sender") {
		@groups_axis
		set title "Sender cost per call, " . s1 . "-byte messages (median, bars min-max)\n" . note
		set ylabel "ns per call"
		set logscale y
		plot f("sender-routed-send-indexed") u 1:2:3:4 w yerrorlines ls 1 t "routed send", \
		     f("sender-routed-try_send-indexed") u 1:2:3:4 w yerrorlines ls 2 t "routed try_send", \
		     f("sender-direct-send--") u 1:2:3:4 w yerrorlines ls 3 t "direct send", \
		     f("sender-direct-try_send--") u 1:2:3:4 w yerrorlines ls 5 t "direct try_send", \
		     f("sender-routed-send-flat") u 1:2:3:4 w yerrorlines ls 6 dt 2 t "routed send, flat router", \
		     f("sender-routed-send-chain") u 1:2:3:4 w yerrorlines ls 4 dt 2 t "routed send, chain router", \
		     f("sender-disturbed") u 1:2 w p ls 9 t (marked("sender") ? "disturbed sample" : "")
	}
	if (name eq "throughput") {
		@groups_axis
		set title "Delivered messages per second, " . s1 . "-byte messages (median, bars min-max)\n" . note
		set ylabel "messages/s"
		set logscale y
		plot f("tput-routed-send-indexed") u 1:2:3:4 w yerrorlines ls 1 t "routed send", \
		     f("tput-routed-try_send-indexed") u 1:2:3:4 w yerrorlines ls 2 t "routed try_send", \
		     f("tput-direct-send--") u 1:2:3:4 w yerrorlines ls 3 t "direct send", \
		     f("tput-direct-try_send--") u 1:2:3:4 w yerrorlines ls 5 t "direct try_send", \
		     f("tput-routed-send-flat") u 1:2:3:4 w yerrorlines ls 6 dt 2 t "routed send, flat router", \
		     f("tput-routed-send-chain") u 1:2:3:4 w yerrorlines ls 4 dt 2 t "routed send, chain router", \
		     f("tput-disturbed") u 1:2 w p ls 9 t (marked("tput") ? "disturbed sample" : "")
	}
	if (name eq "latency") {
		@groups_axis
		set title "Latency at a fixed offered load, send to handler (median over runs, bars min-max)\n" . note
		set ylabel "microseconds"
		set logscale y
		plot f("lat-routed-p50") u 1:($2/1e3):($3/1e3):($4/1e3) w yerrorlines ls 1 t "routed p50", \
		     f("lat-routed-p99") u 1:($2/1e3):($3/1e3):($4/1e3) w yerrorlines ls 1 dt 2 t "routed p99", \
		     f("lat-routed-p999") u 1:($2/1e3):($3/1e3):($4/1e3) w yerrorlines ls 1 dt 3 t "routed p99.9", \
		     f("lat-direct-p50") u 1:($2/1e3):($3/1e3):($4/1e3) w yerrorlines ls 3 t "direct p50", \
		     f("lat-direct-p99") u 1:($2/1e3):($3/1e3):($4/1e3) w yerrorlines ls 3 dt 2 t "direct p99", \
		     f("lat-direct-p999") u 1:($2/1e3):($3/1e3):($4/1e3) w yerrorlines ls 3 dt 3 t "direct p99.9", \
		     f("lat-disturbed") u 1:($2/1e3) w p ls 9 t (marked("lat") ? "disturbed sample" : "")
	}
	if (name eq "idle") {
		@groups_axis
		set title "Idle system (no traffic, past the spin budget): router + groups CPU"
		set ylabel "% of one CPU"
		set yrange [0:*]
		plot f("idle") u 1:2:3:4 w yerrorlines ls 1 t "router + G groups"
	}
	if (name eq "ring") {
		set logscale x 2
		set xrange [12:1400]
		set xtics (16, 64, 256, 1024)
		set xlabel "payload (bytes)"
		set logscale y
		set title "Ring throughput, one producer process -> one consumer process (median, bars min-max; dashed: batch 32)"
		set ylabel "million messages/s"
		plot for [i = 1:words(contenders)] f("ring-" . word(contenders, i) . "-b1") \
			u 1:2:3:4 w yerrorlines ls i t word(contenders, i) . " batch 1", \
		     for [i = 1:words(contenders)] f("ring-" . word(contenders, i) . "-b32") \
			u 1:2:3:4 w yerrorlines ls i dt 2 t word(contenders, i) . " batch 32", \
		     f("ring-disturbed") u 1:2 w p ls 9 t (marked("ring") ? "disturbed sample" : "")
	}
	set output
	unset logscale
	unset yrange
}
