#!/usr/bin/env python3
"""Split a system-wide perf profile of shoal-bench-net by stage, per message.

usage: split.py cpu   PERF_SCRIPT PROCMAP STDERR OUT_PREFIX
       split.py trace PERF_SCRIPT PROCMAP STDERR OUT_PREFIX
       split.py roles PROCMAP      (pid and tid -> stage, for perf report's pids)

PERF_SCRIPT: `perf script -F comm,pid,tid,cpu,time,period,event,ip,sym,dso`
(with callchains for `cpu`, from `perf record -e cpu-clock -a -g -k
CLOCK_MONOTONIC`; for `trace`, from `perf record -k CLOCK_MONOTONIC -a -e
cpu-clock -e raw_syscalls:sys_enter -e sched:sched_switch`, `-F` adding
trace). PROCMAP: procmap.py's snapshots taken during the run (pids and
tids to stages). STDERR: the benchmark's progress lines (the rate of each
sample, in order).

The timed window of a sample: from the consumer's first to its last CPU
sample whose leaf is in the loop that takes and checks each message
(bench_msg_check() is inlined into on_message(), called by deliver_group(),
for the bridge's group; into zmq_tput_b(), beside zmq_recv(), for ZeroMQ's
side B): it runs only between the first and the last message. Messages in the
window = the sample's rate x the window's length. Everything counted
inside the window, on both CPUs and by every process, is divided by that.
"""
import collections, json, re, statistics, sys

SOFTIRQ = {"handle_softirqs", "__do_softirq", "net_rx_action", "do_softirq",
           "__local_bh_enable_ip", "process_backlog"}
SYSCALL = {"do_syscall_64", "entry_SYSCALL_64_after_hwframe", "entry_SYSCALL_64"}
# User-space leaves that are where a system call returns: on this VM (PVM)
# the sample of a clock tick that came during a system call is often taken
# only when interrupts are enabled again, back in its libc wrapper.
WRAPPERS = {"syscall", "epoll_wait", "__libc_sendmsg", "__libc_recv", "__poll", "__send",
            "__futex_abstimed_wait_common", "__GI___lll_lock_wake", "__GI___lll_lock_wait",
            "clock_nanosleep@GLIBC_2.2.5", "__nanosleep", "__GI___wait4", "__getpid",
            "__getrusage", "read", "__GI___libc_write", "__libc_write", "recv", "recvfrom",
            "sendmsg", "pthread_cond_signal@@GLIBC_2.3.2", "__GI___pthread_mutex_unlock_usercnt",
            "__libc_recvfrom", "__libc_send", "epoll_ctl", "__GI_epoll_wait"}
CHECK = {"bench_msg_check", "on_message", "deliver_group", "zmq_tput_b", "zmq_recv"}


def load_procmap(path):
    pids, tids = {}, {}
    for line in open(path):
        s = json.loads(line)
        p = pids.setdefault(s["pid"], {"cmd": s["cmd"], "group": s["group"],
                                       "cpus": set(), "ppid": s["ppid"], "comms": set(),
                                       "main": ""})
        p["cpus"].add(s["cpus"])
        for t in s["tasks"]:
            e = tids.setdefault(t["tid"], {"pid": s["pid"], "comm": t["comm"], "snaps": []})
            e["comm"] = t["comm"]
            e["snaps"].append((s["t"], t["vcs"], t["nvcs"], t["sys"]))
            p["comms"].add(t["comm"])
            if t["tid"] == s["pid"]:
                p["main"] = t["comm"]
    for pid, p in pids.items():
        p["role"] = pid_role(pid, p, pids)
    return pids, tids


def pid_role(pid, p, pids):
    """procmap.py reads a process's cmdline and environment once, when it
    first sees it, which may be between fork() and exec(): then they are its
    parent's. The threads' names, read every time, settle it."""
    cmd, grp = p["cmd"], p["group"]
    host = "A" if "--host a" in cmd else "B" if "--host b" in cmd else None
    if host is None:
        parent = pids.get(p["ppid"])
        if parent is not None and parent is not p:
            side = pid_role(p["ppid"], parent, pids) or ""
            host = "A" if side == "side A" else "B" if side == "side B" else "?"
    if p["main"] == "shoal-bench-net":
        if grp == "bench-a":
            return "group A (producer)"
        if grp == "bench-b":
            return "group B (consumer)"
        if cmd.startswith("shoal run"):
            return "group A (producer)" if host == "A" else "group B (consumer)"
        if "shoal-bench-net" in cmd:
            # A side is forked unpinned ("0-1"), then pinned to its CPU.
            if "0" in p["cpus"]:
                return "side A"
            if "1" in p["cpus"]:
                return "side B"
            return "harness"
        return None
    if p["main"] == "shoal":
        if "async" in p["comms"] or " bridge " in cmd:
            return "bridge " + host
        if cmd.startswith("shoal run") or any(c.startswith("shoal-disp") for c in p["comms"]):
            return "router " + host
    return None


def thread_role(role, pid, tid, comm):
    if role is None:
        return None
    if tid == pid:
        return "main"
    if comm == "async":
        return "ucx async"
    if comm.startswith("shoal-"):
        return comm
    if comm.startswith("ZMQbg/IO"):
        return "zmq I/O"
    if comm.startswith("ZMQbg"):
        return comm
    if role.startswith("bridge"):
        return "watcher"
    return "other thread"


def parse_perf(path):
    """Yield (comm, pid, tid, cpu, t_ns, period, event, frames, trace)."""
    head = re.compile(r"^\s*(.+?)\s+(-?\d+)/(\d+)\s+\[(\d+)\]\s+(\d+)\.(\d+):\s+(?:(\d+)\s+)?(\S+):(?:\s+(.*))?$")
    cur, frames = None, []
    for line in open(path, errors="replace"):
        if line.startswith(("\t", " ")) and cur is not None and re.match(r"^\s+[0-9a-f]+ ", line):
            m = re.match(r"^\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$", line)
            if m:
                frames.append((m.group(2), m.group(3)))
            continue
        if not line.strip():
            if cur is not None:
                yield cur + (frames,)
            cur, frames = None, []
            continue
        m = head.match(line)
        if m is None:
            continue
        if cur is not None:
            yield cur + (frames,)
            frames = []
        comm, pid, tid, cpu, s, frac, period, event, rest = m.groups()
        rest = rest or ""
        t = int(s) * 1000000000 + int(frac.ljust(9, "0")[:9])
        ip = re.match(r"^([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$", rest.strip())
        if ip:
            frames = [(ip.group(2), ip.group(3))]
            rest = ""
        cur = (comm.strip(), int(pid), int(tid), int(cpu), t, int(period or 0), event, rest)
    if cur is not None:
        yield cur + (frames,)


def category(frames):
    if not frames:
        return "?"
    leaf_dso = frames[0][1]
    if "kernel" not in leaf_dso:
        return "syscall" if frames[0][0].split("+")[0] in WRAPPERS else "user"
    syms = {f[0].split("+")[0] for f in frames}
    if syms & SOFTIRQ:
        return "softirq/net"
    if syms & SYSCALL:
        return "syscall"
    return "kernel other"


# What a sample was for, by its leaf (and, in a system call, by the call).
SPIN = {"shoal_doorbell_poll_wait", "shoal_doorbell_idle_wait", "dispatcher_main",
        "__vdso_clock_gettime", "clock_gettime@@GLIBC_2.17", "[unknown]@[vdso]", "spin",
        "bench_barrier", "bench_probe"}
WAKE_CALLS = ("futex", "membarrier", "poll", "getrusage", "syscall", "pthread_cond",
              "lll_lock", "mutex_unlock", "futex_abstimed", "read", "write", "clock_nanosleep",
              "nanosleep", "wait4", "getpid")
EVENT_CALLS = ("epoll",)
DATA_CALLS = ("sendmsg", "sendto", "send", "recvfrom", "recv")
BUCKETS = ("work", "spin", "sleep/wake calls", "epoll", "TCP calls", "TCP softirq",
           "other kernel", "other calls")


def bucket(cat, frames):
    if cat == "user":
        leaf, dso = frames[0][0].split("+")[0], frames[0][1]
        if leaf in SPIN or (leaf == "[unknown]" and "vdso" in dso):
            return "spin"
        return "work"
    if cat == "softirq/net":
        return "TCP softirq"
    if cat == "syscall":
        name = syscall_name(frames).replace("in ", "")
        if any(k in name for k in EVENT_CALLS):
            return "epoll"
        if any(name.startswith(k) or ("libc_" + k) in name or ("__" + k) == name
               for k in DATA_CALLS):
            return "TCP calls"
        if any(k in name for k in WAKE_CALLS):
            return "sleep/wake calls"
        return "other calls"
    return "other kernel"


def syscall_name(frames):
    for sym, _ in frames:
        s = sym.split("+")[0]
        if s.startswith(("__x64_sys_", "__do_sys_", "__se_sys_")):
            return s.replace("__x64_sys_", "").replace("__do_sys_", "").replace("__se_sys_", "")
    # On this VM (PVM) most syscall samples land where interrupts are
    # enabled again on the way out (pvm_irq_enable under do_syscall_64):
    # the libc wrapper that made the call names it.
    for sym, dso in frames:
        if "kernel" not in dso:
            return "in " + sym.split("+")[0]
    return "?"


def rates(path):
    out = []
    for line in open(path):
        m = re.search(r"run (\d+)/\d+ tput (\S+) (\d+) B: (\d+) msg/s", line)
        if m:
            out.append((int(m.group(1)), m.group(2), int(m.group(3)), float(m.group(4))))
    return out


def stage_of(pids, tids, comm, pid, tid):
    if pid == 0:
        return ("idle", "")
    p = pids.get(pid)
    role = p["role"] if p else None
    if role is None:
        if comm.startswith("ksoftirqd"):
            return ("ksoftirqd", "")
        return ("not the benchmark", "")
    tc = tids.get(tid, {}).get("comm", comm)
    return (role, thread_role(role, pid, tid, tc))


def windows(samples, pids, rate_list, consumer):
    """The timed window of each sample: [first, last] bench_msg_check leaf
    of each consumer pid, in time order, matched to the rate lines."""
    span = {}
    for (comm, pid, tid, cpu, t, period, event, rest, frames) in samples:
        if frames and frames[0][0].split("+")[0] in CHECK and pid in pids and \
           pids[pid]["role"] == consumer:
            a, b = span.get(pid, (t, t))
            span[pid] = (min(a, t), max(b, t))
    wins = sorted(span.items(), key=lambda kv: kv[1][0])
    if len(wins) != len(rate_list):
        sys.exit(f"{len(wins)} consumer windows, {len(rate_list)} rate lines")
    return [(w[1][0], w[1][1], r) for w, r in zip(wins, rate_list)]


def med(v):
    return statistics.median(v) if v else 0.0


def cpu_mode(perf, procmap, stderr, out):
    pids, tids = load_procmap(procmap)
    samples = list(parse_perf(perf))
    rl = rates(stderr)
    consumer = "group B (consumer)" if rl and rl[0][1] == "shoal-bridge" else "side B"
    wins = windows(samples, pids, rl, consumer)
    # per window: (stage, thread) -> cat -> ns ; symbols per stage
    per = []
    syms = collections.defaultdict(collections.Counter)
    sysc = collections.defaultdict(collections.Counter)
    for (t0, t1, r) in wins:
        acc = collections.defaultdict(collections.Counter)
        for (comm, pid, tid, cpu, t, period, event, rest, frames) in samples:
            if t < t0 or t > t1:
                continue
            st = stage_of(pids, tids, comm, pid, tid)
            cat = category(frames) if st[0] != "idle" else "idle"
            acc[st][cat] += period
            if st[0] != "idle":
                acc[st]["b:" + bucket(cat, frames)] += period
            key = (r[2],) + st
            leaf = frames[0][0].split("+")[0] if frames else "?"
            dso = frames[0][1].split("/")[-1] if frames else "?"
            syms[key][f"{leaf} [{dso}]"] += period
            if cat == "syscall":
                sysc[key][syscall_name(frames)] += period
        msgs = r[3] * (t1 - t0) / 1e9
        per.append((r, t0, t1, msgs, acc))
    with open(out + ".txt", "w") as f:
        for payload in sorted({r[2] for r, *_ in per}):
            runs = [x for x in per if x[0][2] == payload]
            stages = sorted({k for x in runs for k in x[4]})
            f.write(f"## {runs[0][0][1]} {payload} B: CPU ns per message, median over "
                    f"{len(runs)} samples\n")
            f.write("rates (msg/s): " + ", ".join(f"{x[0][3]:.0f}" for x in runs) + "\n")
            f.write("windows (ms): " + ", ".join(f"{(x[2]-x[1])/1e6:.0f}" for x in runs) + "\n")
            f.write(f"{'stage':28s} {'thread':14s} {'total':>8s} {'user':>8s} {'syscall':>8s} "
                    f"{'softirq':>8s} {'k-other':>8s}  per-run totals\n")
            for st in stages:
                vals = {c: [x[4][st][c] / x[3] for x in runs] for c in
                        ("user", "syscall", "softirq/net", "kernel other", "idle", "?")}
                total = [sum(v for k, v in x[4][st].items() if not k.startswith("b:")) / x[3]
                         for x in runs]
                f.write(f"{st[0]:28s} {st[1]:14s} {med(total):8.1f} {med(vals['user']):8.1f} "
                        f"{med(vals['syscall']):8.1f} {med(vals['softirq/net']):8.1f} "
                        f"{med(vals['kernel other']):8.1f}  "
                        + " ".join(f"{v:.0f}" for v in total) + "\n")
            f.write("\n")
            f.write(f"By what it was for (ns per message, median over samples): spin = "
                    f"busy-wait loops and their clock reads; sleep/wake calls = futex, "
                    f"membarrier, poll, eventfd read/write, getrusage, the watcher's "
                    f"condition variable; epoll = epoll_wait (UCX's and ZeroMQ's progress); "
                    f"TCP calls = sendmsg/sendto/recvfrom/recv\n")
            f.write(f"{'stage':28s} {'thread':14s}" + "".join(f" {b[:12]:>12s}" for b in BUCKETS)
                    + "\n")
            sums = collections.Counter()
            for st in stages:
                if st[0] in ("idle", "not the benchmark", "ksoftirqd"):
                    continue
                vals = [med([x[4][st]["b:" + b] / x[3] for x in runs]) for b in BUCKETS]
                for b, v in zip(BUCKETS, vals):
                    sums[b] += v
                f.write(f"{st[0]:28s} {st[1]:14s}" + "".join(f" {v:12.1f}" for v in vals) + "\n")
            f.write(f"{'sum of the stages':43s}" + "".join(f" {sums[b]:12.1f}" for b in BUCKETS)
                    + f"   total {sum(sums.values()):.0f}\n\n")
            allmsgs = sum(x[3] for x in runs)
            for st in stages:
                key = (payload,) + st
                allns = sum(syms[key].values())
                if allns == 0 or st[0] in ("idle",):
                    continue
                f.write(f"### {st[0]} / {st[1]}: top leaf symbols, ns per message over all "
                        f"windows (share of the stage)\n")
                for s, v in syms[key].most_common(20):
                    f.write(f"  {v/allmsgs:7.1f} ns {100*v/allns:5.1f}%  {s}\n")
                if sysc[key]:
                    f.write("  system calls by time (ns per message): " + ", ".join(
                        f"{k} {v/allmsgs:.1f}" for k, v in sysc[key].most_common(8)) + "\n")
                f.write("\n")
    # context switches per 1000 messages, from procmap's counters
    with open(out + ".cs.txt", "w") as f:
        f.write("context switches per 1000 messages (procmap counters, 100 ms snapshots, "
                "rate over the window's snapshots x 1000 / msg rate), median over samples\n")
        by = collections.defaultdict(lambda: collections.defaultdict(list))
        for (r, t0, t1, msgs, acc) in per:
            seen = collections.defaultdict(lambda: [0.0, 0.0])
            for tid, e in tids.items():
                sn = [s for s in e["snaps"] if t0 <= s[0] <= t1]
                if len(sn) < 2:
                    continue
                dt = (sn[-1][0] - sn[0][0]) / 1e9
                role = pids[e["pid"]]["role"]
                st = (role, thread_role(role, e["pid"], tid, e["comm"]))
                seen[st][0] += (sn[-1][1] - sn[0][1]) / dt * 1000 / r[3]
                seen[st][1] += (sn[-1][2] - sn[0][2]) / dt * 1000 / r[3]
            for st, v in seen.items():
                by[r[2]][st].append(v)
        for payload in sorted(by):
            f.write(f"\n## {payload} B\n{'stage':28s} {'thread':14s} {'voluntary':>10s} "
                    f"{'involuntary':>12s}\n")
            for st in sorted(by[payload]):
                v = by[payload][st]
                f.write(f"{st[0]:28s} {st[1]:14s} {med([x[0] for x in v]):10.2f} "
                        f"{med([x[1] for x in v]):12.2f}\n")


def trace_mode(perf, procmap, stderr, out):
    pids, tids = load_procmap(procmap)
    rl = rates(stderr)
    consumer = "group B (consumer)" if rl and rl[0][1] == "shoal-bridge" else "side B"
    cpu = (x for x in parse_perf(perf) if x[6].startswith("cpu-clock"))
    wins = windows(cpu, pids, rl, consumer)
    acc = [collections.defaultdict(collections.Counter) for _ in wins]
    names = collections.defaultdict(collections.Counter)
    nr = re.compile(r"NR (\d+)")
    prev_state = re.compile(r"prev_state=(\S+)")
    nxt = re.compile(r"next_comm=(.*?) next_pid=(\d+)")
    for (comm, pid, tid, c, t, period, event, rest, frames) in parse_perf(perf):
        if event.startswith("cpu-clock"):
            continue
        i = next((j for j, w in enumerate(wins) if w[0] <= t <= w[1]), None)
        if i is None:
            continue
        payload = wins[i][2][2]
        st = stage_of(pids, tids, comm, pid, tid)
        if event.startswith("raw_syscalls:sys_enter"):
            acc[i][st]["syscalls"] += 1
            m = nr.search(rest)
            names[(payload,) + st][m.group(1) if m else "?"] += 1
        elif event.startswith("sched:sched_switch"):
            m = prev_state.search(rest)
            state = m.group(1) if m else "?"
            acc[i][st]["switch out, preempted" if state.startswith("R") else
                       "switch out, slept"] += 1
            m = nxt.search(rest)
            if m:
                ntid = int(m.group(2))
                npid = tids[ntid]["pid"] if ntid in tids else (0 if ntid == 0 else -1)
                acc[i][stage_of(pids, tids, m.group(1), npid, ntid)]["switched in"] += 1
    by = collections.defaultdict(lambda: collections.defaultdict(list))
    for (t0, t1, r), a in zip(wins, acc):
        msgs = r[3] * (t1 - t0) / 1e9
        for st, c in a.items():
            by[r[2]][st].append({k: v * 1000 / msgs for k, v in c.items()})
    with open(out + ".txt", "w") as f:
        f.write("per 1000 messages, median over samples (window: the consumer's first to "
                "last sample in its check of a message); syscalls by number (x86-64)\n")
        for payload in sorted(by):
            f.write(f"\n## {payload} B\n{'stage':28s} {'thread':14s} {'syscalls':>9s} "
                    f"{'slept':>8s} {'preempted':>10s} {'switched in':>12s}  syscalls by nr\n")
            for st in sorted(by[payload]):
                v = by[payload][st]
                g = lambda k: med([x.get(k, 0.0) for x in v])
                top = names[(payload,) + st].most_common(6)
                tn = sum(names[(payload,) + st].values()) or 1
                f.write(f"{st[0]:28s} {st[1]:14s} {g('syscalls'):9.2f} "
                        f"{g('switch out, slept'):8.2f} {g('switch out, preempted'):10.2f} "
                        f"{g('switched in'):12.2f}  "
                        + " ".join(f"{k}:{100*n/tn:.0f}%" for k, n in top) + "\n")


def roles_mode(procmap):
    pids, tids = load_procmap(procmap)
    for tid in sorted(tids):
        e = tids[tid]
        role = pids[e["pid"]]["role"]
        print(f"{e['pid']:7d} {tid:7d} {e['comm']:16s} {role or '-':20s} "
              f"{thread_role(role, e['pid'], tid, e['comm']) or '-'}")


if __name__ == "__main__":
    if sys.argv[1] == "roles":
        roles_mode(sys.argv[2])
    else:
        mode, a, b, c, d = sys.argv[1:6]
        (cpu_mode if mode == "cpu" else trace_mode)(a, b, c, d)
