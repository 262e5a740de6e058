# gnuplot seed.gp: the seed's table across processes (bench/SUITE.md)
set terminal svg size 720,420 font "sans,12"
set output 'seed.svg'
set title 'routed send and direct send_to, 64 B: wall ns per call (medians of 5 runs)'
set xlabel 'consumer groups (one process each, 2 CPUs)'
set ylabel 'ns per call'
set logscale x
set xtics (1,2,5,10,20,30,50,75,100)
set key top left
set grid
plot 'seed.dat' using 1:2 with linespoints title 'Shoal routed send', \
     '' using 1:3 with linespoints title 'Shoal direct send_to', \
     '' using 1:4 with linespoints title 'plain SPSC rings, same wake policy', \
     '' using 1:5 with points pt 7 ps 1.5 title 'elfo, one process (flat vector)'
