# gnuplot script for scripts/bench.sh: requests/s of idemproxy next to its
# reference for each scenario, one panel per connection count.
# Called with -e "data='FILE'; sdata='FILE'; out='FILE'; subtitle='TEXT'";
# data holds one line per scenario and connection count, tab-separated:
#   CONNECTIONS  SLOT(1-6)  IDEMPROXY_RPS  REFERENCE_RPS  IDEMPROXY_MIN
#   IDEMPROXY_MAX  REFERENCE_MIN  REFERENCE_MAX
# (the rps are medians of the rounds, drawn as boxes with min-max bars)
# and sdata one line per streamed transfer (1 download, 2 upload):
#   SLOT  IDEMPROXY_MIBS  NGINX_MIBS
# ("NaN" for a figure that was not measured).

set terminal pngcairo size 1400,1400 font "DejaVu Sans,10"
set output out
set datafile separator "\t"
set datafile missing "NaN"
set style fill solid 0.85 border rgb "#333333"
set boxwidth 0.36
set grid ytics lc rgb "#dddddd"
set key top right
set ylabel "requests/s (pgbench: claim+finish pairs/s)"
set bmargin 4.5
set lmargin 12
set xrange [0.4:6.6]
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
set format y "%.0f"
set xtics nomirror ( \
	"pass-through GET\nref: faster of nginx, HAProxy" 1, \
	"owner POST\nref: pgbench ceiling" 2, \
	"owner POST, 1 connection\nref: its floor (pass-through + pgbench)" 3, \
	"replay POST\nref: nginx static answer" 4, \
	"owner POST, 1M records\nref: empty table" 5, \
	"replay POST, 1M records\nref: empty table" 6)

idem = "#2b6cb0"
ref = "#a0a0a0"
L = 0.19

set multiplot layout 3,1 title "idemproxy benchmark (wrk, curl, loopback)\n".subtitle
do for [c in "64 1"] {
	set title sprintf("%s connection%s", c, c eq "1" ? "" : "s")
	plot data using ($1 == c + 0 ? $2 - L : NaN):3 with boxes lc rgb idem title "idemproxy", \
	     data using ($1 == c + 0 ? $2 + L : NaN):4 with boxes lc rgb ref title "reference", \
	     data using ($1 == c + 0 ? $2 - L : NaN):5:(0):($6 - $5) with vectors nohead lw 1.5 lc rgb "#333333" notitle, \
	     data using ($1 == c + 0 ? $2 + L : NaN):7:(0):($8 - $7) with vectors nohead lw 1.5 lc rgb "#333333" notitle, \
	     data using ($1 == c + 0 ? $2 - L : NaN):($6 > $3 ? $6 : $3):(sprintf("%.0f", $3)) with labels offset 0,0.8 font ",9" notitle, \
	     data using ($1 == c + 0 ? $2 + L : NaN):($8 > $4 ? $8 : $4):(sprintf("%.0f", $4)) with labels offset 0,0.8 font ",9" notitle
}
set title "1 GiB streamed through (curl, best of 5)"
set ylabel "MiB/s"
set xrange [0.4:2.6]
set xtics nomirror noenhanced ("download\nref: nginx, proxy_buffering off" 1, "upload\nref: nginx, proxy_request_buffering off" 2)
plot sdata using ($1 - L):2 with boxes lc rgb idem title "idemproxy", \
     sdata using ($1 + L):3 with boxes lc rgb ref title "nginx proxy", \
     sdata using ($1 - L):2:(sprintf("%.0f", $2)) with labels offset 0,0.8 font ",9" notitle, \
     sdata using ($1 + L):3:(sprintf("%.0f", $3)) with labels offset 0,0.8 font ",9" notitle
unset multiplot
