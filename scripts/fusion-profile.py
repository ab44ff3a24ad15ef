#!/usr/bin/env python3
"""Where a running program's time goes, by XLA fusion, on the CPU plugin.

    scripts/fusion-profile.py [--wait S] [--seconds S] [--top N] -- COMMAND [ARGS...]

Starts COMMAND (a program that runs a compiled kernel many times, e.g. a
benchmark; through `cargo run` or `cargo bench` the busiest process under it
is sampled), waits `--wait` seconds (default 10) for it to compile and warm up,
samples every thread of it for `--seconds` seconds (default 4) with `perf
record`, then names each sampled address and prints the share of samples per
name, largest first, and per library. Ends COMMAND (by its process id) when it
is done (and the process sampled under it), unless it exited earlier.

Why two tools: the CPU plugin compiles each fusion to machine code at run time,
which `perf` shows only as `[JIT]` addresses. The plugin registers that code
with GDB's JIT interface, so `gdb` attached to the process (in batch mode, for
a moment) names each address: the fusion names of XLA's optimized HLO
(`subtract_exponential_fusion`, `gather_bitcast_fusion`, ..., the same names as
in `XLA_FLAGS=--xla_dump_to=DIR`). Addresses it cannot name are grouped as
`(JIT code without a symbol)`: on this plugin, the matrix-multiply
micro-kernels it generates. Code inside the plugin's library (YNNPACK's
reductions, Eigen's thread pool, its packing routines) is named by `perf`
itself.

Executables that tessel loads from its persistent cache were compiled by another
process and are not registered with GDB, so their fusions would all read as
`(JIT code without a symbol)`: COMMAND runs with `TESSEL_EXECUTABLE_CACHE=off`
(unless it is set already), so that every kernel is compiled, and registered,
in the process sampled.

Needs `perf` and `gdb` on PATH, permission to profile and to attach to the
process (`kernel.perf_event_paranoid` at most 1 and `kernel.yama.ptrace_scope`
0, or root). The process stops for as long as gdb takes to name the addresses.
"""

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NO_SYMBOL = "(JIT code without a symbol)"
LINE = re.compile(r"^\s*([\d.]+)%\s+(.+?)\s+\[(.)\]\s+(\S.*)$")


def fail(message):
    print(f"fusion-profile: {message}", file=sys.stderr)
    sys.exit(2)


def samples(perf_data):
    """(percent, library, symbol) of every sampled symbol or address."""
    out = subprocess.run(
        ["perf", "report", "-i", perf_data, "--no-children", "--sort", "dso,sym",
         "-g", "none", "--stdio", "--percent-limit", "0"],
        capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        fail(f"perf report failed: {out.stderr.strip().splitlines()[-1:]}")
    rows = []
    for line in out.stdout.splitlines():
        m = LINE.match(line)
        if m:
            rows.append((float(m.group(1)), m.group(2), m.group(4).strip()))
    return rows


def busiest_descendant(pid):
    """`pid`, or the process under it (e.g. the binary `cargo run` started)
    that used the most CPU time: the one whose code is to be sampled."""
    children = collections.defaultdict(list)
    cpu = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        children[int(fields[1])].append(int(entry))
        cpu[int(entry)] = int(fields[11]) + int(fields[12])
    tree, todo = [pid], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            tree.append(c)
            todo.append(c)
    return max(tree, key=lambda p: cpu.get(p, 0))


def jit_names(pid, addresses):
    """The symbol gdb gives each address (None where it has none)."""
    if not addresses:
        return {}
    with tempfile.NamedTemporaryFile("w", suffix=".gdb", delete=False) as f:
        for a in addresses:
            f.write(f"info symbol {a}\n")
        script = f.name
    try:
        out = subprocess.run(
            ["gdb", "-p", str(pid), "-batch", "-nx", "-x", script],
            capture_output=True, text=True, check=False,
        )
    finally:
        os.unlink(script)
    answers = [
        line for line in out.stdout.splitlines()
        if " in section " in line or line.startswith("No symbol matches")
    ]
    if len(answers) != len(addresses):
        fail("gdb did not answer for every address (is attaching allowed? "
             "kernel.yama.ptrace_scope must be 0, or run as root): "
             + " ".join(out.stderr.strip().splitlines()[-2:]))
    names = {}
    for a, answer in zip(addresses, answers):
        names[a] = None if answer.startswith("No symbol") else answer.split(" ")[0]
    return names


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wait", type=float, default=10.0,
                   help="seconds to let COMMAND compile and warm up (default 10)")
    p.add_argument("--seconds", type=float, default=4.0,
                   help="seconds of sampling (default 4)")
    p.add_argument("--top", type=int, default=15, help="names to print (default 15)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        fail("no COMMAND given (usage: fusion-profile.py [options] -- COMMAND [ARGS...])")
    for tool in ("perf", "gdb"):
        if shutil.which(tool) is None:
            fail(f"`{tool}` is not on PATH; install it (e.g. the linux-perf and gdb packages)")

    with tempfile.TemporaryDirectory() as tmp:
        perf_data = os.path.join(tmp, "perf.data")
        log = open(os.path.join(tmp, "command.log"), "w")
        env = dict(os.environ)
        env.setdefault("TESSEL_EXECUTABLE_CACHE", "off")
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        target = None
        try:
            time.sleep(args.wait)
            if child.poll() is not None:
                fail(f"COMMAND exited (status {child.returncode}) before sampling began; give it "
                     "more runs or a shorter --wait")
            target = busiest_descendant(child.pid)
            rec = subprocess.run(
                ["perf", "record", "-q", "-o", perf_data, "-p", str(target),
                 "--", "sleep", str(args.seconds)],
                capture_output=True, text=True, check=False,
            )
            if rec.returncode != 0 or not os.path.exists(perf_data):
                fail("perf record failed (kernel.perf_event_paranoid may forbid it): "
                     + " ".join(rec.stderr.strip().splitlines()[-2:]))
            if child.poll() is not None:
                fail("COMMAND exited while it was sampled, so its JIT code can no longer be "
                     "named; give it more runs")
            rows = samples(perf_data)
            addresses = sorted({sym for _, dso, sym in rows
                                if dso.startswith("[JIT]") and sym.startswith("0x")})
            names = jit_names(target, addresses)
        finally:
            # The sampled process first: `cargo` does not pass the signal on.
            if target is not None and target != child.pid and child.poll() is None:
                try:
                    os.kill(target, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
                child.wait()
            log.close()

    by_name = collections.Counter()
    by_library = collections.Counter()
    for pct, dso, sym in rows:
        jit = dso.startswith("[JIT]")
        name = (names.get(sym) or NO_SYMBOL) if jit else sym
        by_name[name] += pct
        by_library["[JIT] (compiled fusions and kernels)" if jit else dso] += pct
    total = sum(by_name.values())
    print(f"{total:.1f}% of the samples named; by fusion or symbol:")
    for name, pct in by_name.most_common(args.top):
        print(f"{pct:6.2f}%  {name[:150]}")
    print("by library:")
    for lib, pct in by_library.most_common(6):
        print(f"{pct:6.2f}%  {lib}")


if __name__ == "__main__":
    main()
