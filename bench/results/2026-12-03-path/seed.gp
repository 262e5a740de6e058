# gnuplot seed.gp: the seed's table across processes (bench/SUITE.md)
set terminal svg size 760,440 font "sans,12"
set output 'seed.svg'
set title 'routed send and direct send_to, 64 B: wall ns per call (medians of 3 runs)'
set xlabel 'consumer groups (one process each, 2 CPUs)'
set ylabel 'ns per call'
set logscale x
set xtics (1,2,5,10,20,30,50,75,100)
set key top left
set grid
plot 'seed.dat' using 1:2 with linespoints lw 2 title 'Shoal routed send', \
     '' using 1:3 with linespoints lw 2 title 'Shoal direct send_to', \
     '' using 1:4 with linespoints title 'plain SPSC rings, same wake policy', \
     '' using 1:5 with linespoints dt 2 title 'routed send at 7dbb76a (same VM state)', \
     '' using 1:6 with linespoints dt 2 title 'direct send_to at 7dbb76a', \
     '' using 1:7 with points pt 7 ps 1.5 title 'elfo, one process (flat vector)'
