#!/usr/bin/env python3
"""Snapshot the benchmark's processes and threads every 100 ms until killed.

For every process whose comm is `shoal` or `shoal-bench-net` (and every one of
its threads): one JSON line per snapshot with the monotonic time, pid, ppid,
cmdline, $SHOAL_GROUP (both read once per pid, when first seen: possibly
between fork() and exec(), so its parent's; split.py tells by the threads'
names), the CPUs allowed, and per thread its comm, the system
call it sits in (/proc/.../syscall) and its voluntary/nonvoluntary context
switch counters. The analysis (split.py) maps perf's pids and tids to stages
with it. Usage: procmap.py OUT.jsonl
"""
import json, os, sys, time

COMMS = {"shoal", "shoal-bench-net"}


def rd(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def status_fields(raw, keys):
    out = {}
    for line in raw.decode(errors="replace").splitlines():
        k, _, v = line.partition(":")
        if k in keys:
            out[k] = v.strip()
    return out


def main():
    out = open(sys.argv[1], "w")
    env_cache = {}
    while True:
        now = time.monotonic_ns()
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            comm = rd(f"/proc/{d}/comm")
            if comm is None or comm.decode().strip() not in COMMS:
                continue
            pid = int(d)
            st = rd(f"/proc/{d}/status")
            if st is None:
                continue
            sf = status_fields(st, {"PPid", "Cpus_allowed_list"})
            if pid not in env_cache:
                env = rd(f"/proc/{d}/environ") or b""
                grp = ""
                for kv in env.split(b"\0"):
                    if kv.startswith(b"SHOAL_GROUP="):
                        grp = kv[12:].decode()
                cmd = (rd(f"/proc/{d}/cmdline") or b"").replace(b"\0", b" ").decode().strip()
                env_cache[pid] = (grp, cmd)
            grp, cmd = env_cache[pid]
            tasks = []
            try:
                tids = os.listdir(f"/proc/{d}/task")
            except OSError:
                continue
            for t in tids:
                tc = rd(f"/proc/{d}/task/{t}/comm")
                ts = rd(f"/proc/{d}/task/{t}/status")
                sc = rd(f"/proc/{d}/task/{t}/syscall")
                if tc is None or ts is None:
                    continue
                tf = status_fields(ts, {"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"})
                tasks.append({"tid": int(t), "comm": tc.decode().strip(),
                              "sys": (sc or b"?").split()[0].decode() if sc else "?",
                              "vcs": int(tf.get("voluntary_ctxt_switches", 0)),
                              "nvcs": int(tf.get("nonvoluntary_ctxt_switches", 0))})
            out.write(json.dumps({"t": now, "pid": pid, "ppid": int(sf.get("PPid", 0)),
                                  "cpus": sf.get("Cpus_allowed_list", ""), "group": grp,
                                  "cmd": cmd, "tasks": tasks}) + "\n")
        out.flush()
        time.sleep(0.1)


main()
