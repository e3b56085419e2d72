#!/bin/bash
# The A/B loop of NOTE.md: runs each binary in turn (args: rounds, binaries...), prints min and median of medians.
# usage: ab.sh rounds bin1 bin2 ... ; prints per-binary min-of-min and median-of-median
R=$1; shift
for r in $(seq $R); do for b in "$@"; do echo "$b $(./$b 60)"; done; done | python3 -c '
import sys,statistics as st
d={}
for l in sys.stdin:
    f=l.split(); d.setdefault(f[0],[]).append((float(f[2]),float(f[5])))
for b,v in d.items(): print(b,"min %.3f"%min(x[0] for x in v),"median-of-medians %.3f"%st.median(x[1] for x in v))'
