#!/usr/bin/env python3
"""Interleaved A/B runs of a whole-job benchmark's cases (F: benches/features_file.rs, S:
benches/score_job.rs), for comparing two builds or two settings on a noisy machine.

    scripts/bench_ab.py [--rounds N] [--case-var VAR] "CASE;CASE..." LABEL=[ENV=V|ENV=V]@BINARY...

Each round runs every case with every variant in turn (a variant: a label, environment
variables separated by `|`, and a benchmark binary such as a copy of
target/release/deps/features_file-*), so a slow minute of the machine touches every variant
alike. Printed per case and variant: medians (and minima) of wall time, CPU time and peak
resident memory, and the median over rounds of each round's ratio against the first
variant (the paired ratio, steadier than a ratio of medians here), and the share of the
machine's CPU ticks the hypervisor stole while the variant's runs ran (all rounds together;
"n/a" for a binary built before the benchmarks counted it). A child prints
`items wall_s cpu_s peak_rss_mb host_ticks stolen_ticks` (benches/case_process/mod.rs).

Example, the features run before and after a change:
    cp target/release/deps/features_file-<hash> /tmp/before   # build, then the change
    scripts/bench_ab.py --rounds 7 "tumbling 1 m:2;hopping 5 m / 1 m:2" \\
        before=@/tmp/before after=@target/release/deps/features_file-<hash>
"""

import argparse
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def variant(text):
    label, rest = text.split("=", 1)
    envs, binary = rest.rsplit("@", 1)
    env = dict(kv.split("=", 1) for kv in envs.split("|") if kv)
    return label, env, binary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--case-var", default="WEIR_BENCH_F_CASE")
    parser.add_argument("cases", help="cases separated by ';'")
    parser.add_argument("variants", nargs="+", type=variant)
    args = parser.parse_args()
    cases = args.cases.split(";")
    runs = {}
    for _ in range(args.rounds):
        for case in cases:
            for label, env, binary in args.variants:
                child_env = dict(os.environ, **env, **{args.case_var: case})
                out = subprocess.run(
                    [binary], env=child_env, capture_output=True, text=True, cwd=REPO
                )
                fields = out.stdout.split()
                if out.returncode != 0 or len(fields) < 4:
                    sys.exit(f"{label} {case}: exit {out.returncode}\n{out.stderr[-2000:]}")
                ticks = tuple(map(int, fields[4:6])) if len(fields) >= 6 else (0, 0)
                runs.setdefault((case, label), []).append(tuple(map(float, fields[1:4])) + ticks)
    first = args.variants[0][0]
    for case in cases:
        print(case)
        base = runs[(case, first)]
        for label, _, _ in args.variants:
            got = runs[(case, label)]
            wall, cpu, rss = (sorted(x[i] for x in got) for i in range(3))
            paired = [statistics.median(x[i] / y[i] for x, y in zip(got, base)) for i in (0, 1)]
            ticks, stolen = (sum(x[i] for x in got) for i in (3, 4))
            steal = f"{100 * stolen / ticks:.1f} %" if ticks else "n/a"
            print(
                f"  {label:<12} wall {statistics.median(wall):.3f} (min {wall[0]:.3f})"
                f"  cpu {statistics.median(cpu):.3f} (min {cpu[0]:.3f})"
                f"  rss {statistics.median(rss):.0f} ({rss[0]:.0f}-{rss[-1]:.0f})"
                f"  | paired vs {first}: wall x{paired[0]:.3f} cpu x{paired[1]:.3f}"
                f"  | steal {steal}"
            )


if __name__ == "__main__":
    main()
