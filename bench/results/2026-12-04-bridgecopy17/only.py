#!/usr/bin/env python3
"""Keep the procmap.py snapshots (bench/results/2026-12-03-netprof16) of the
processes whose command line contains SUBSTRING, a build directory: another
tenant's shoal-bench-net, running at the same time, then counts as "not the
benchmark" in split.py instead of adding windows of its own.
usage: only.py SUBSTRING IN.jsonl OUT.jsonl
"""
import json, sys

sub, src, dst = sys.argv[1:4]
with open(src) as f, open(dst, "w") as out:
    for line in f:
        if sub in json.loads(line)["cmd"]:
            out.write(line)
