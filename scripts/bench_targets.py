#!/usr/bin/env python3
"""Prints (or checks) BENCHMARKS.md's "Issue #18's targets at a glance" table from the
tables `scripts/bench.sh` wrote in the sections F, K, S, SP, L, LF and M, so the summary cannot
drift from the figures it summarizes.

    scripts/bench_targets.py           print the body of the section `targets` (bench.sh
                                       writes it there, as it writes every section)
    scripts/bench_targets.py --check   exit 1 when that section is not what the others say

Each target is read from the rows its section's benchmark writes (the labels below); a
section without such a row reads "not measured" rather than failing, so a partial run still
writes a true table.
"""

import re
import sys

PATH = "BENCHMARKS.md"
KINDS = ["tumbling 1 m", "hopping 5 m / 1 m", "session 30 s"]
F_TARGETS = [
    "F: ≥ 3 M events/s wall, 2 workers",
    "F: ≥ 2.5 M events/s per core, 2 workers",
    "F: ≥ 0.5 of `parse_only`, 2 workers",
    "F: peak RSS ≤ 40 MB, 1 and 2 workers",
]
L_TARGET = "L: p99 ≤ 5 ms at 50 % load (p99.9 reported)"
M_TARGET = "M: ≤ 100 bytes per open (key, window)"


def section(text, name):
    """The text between a benchmark's marks, or ''."""
    match = re.search(
        re.escape(f"<!-- bench:{name} -->") + r"(.*?)" + re.escape(f"<!-- /bench:{name} -->"),
        text,
        re.S,
    )
    return match.group(1) if match else ""


def tables(body):
    """Every markdown table of a section: a list of rows, each a dict of header -> cell."""
    found, lines = [], body.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = cells(lines[i])
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(dict(zip(header, cells(lines[i]))))
                i += 1
            found.append(rows)
        else:
            i += 1
    return found


def cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def provenance(body):
    """'2026-12-06 03:12 UTC, commit `355d044`' of a section, or None."""
    match = re.search(r"^(\d{4}-\d\d-\d\d \d\d:\d\d UTC), commit (`[0-9a-f]+`)", body, re.M)
    return f"{match.group(1)}, {match.group(2)}" if match else None


def number(cell):
    return float(cell.replace(" ", "").replace(",", ""))


def joined(cells_, unit=""):
    """Cells as the section wrote them, ' / ' between."""
    return " / ".join(f"{cell}{unit}" for cell in cells_)


def verdict(oks, labels):
    """'yes', 'no' or which of the labels met it."""
    if all(oks):
        return "yes"
    met = [label for ok, label in zip(oks, labels) if ok]
    return ", ".join(met) if met else "no"


def f_targets(body):
    rows = [row for table in tables(body) for row in table]

    def row(kind, workers):
        for r in rows:
            if r.get("case") == kind and r.get("workers") == str(workers):
                return r
        return None

    two = [row(kind, 2) for kind in KINDS]
    one = [row(kind, 1) for kind in KINDS]
    if None in two:
        return [(target, "not measured", "–") for target in F_TARGETS]
    short = ["tumbling", "hopping", "session"]

    def column(rs, name):
        return [r[name] for r in rs]

    wall = column(two, "wall M ev/s")
    core = column(two, "per core M ev/s (CPU time)")
    ratio = column(two, "wall / baseline")
    per_core = joined(core) + " with 2 workers"
    if None not in one:
        per_core += ", " + joined(column(one, "per core M ev/s (CPU time)")) + " with 1"
    # The larger of a kind's two runs.
    rss = [max((r for r in pair if r), key=lambda r: number(r["peak RSS MB"]))["peak RSS MB"]
           for pair in zip(two, one)]
    figures = [
        (joined(wall) + " (tumbling / hopping / session)",
         verdict([number(w) >= 3 for w in wall], short)),
        (per_core, verdict([number(c) >= 2.5 for c in core], short)),
        (joined(ratio), verdict([number(r) >= 0.5 for r in ratio], short)),
        (joined(rss, " MB"), verdict([number(r) <= 40 for r in rss], short)),
    ]
    return [(target, *figure) for target, figure in zip(F_TARGETS, figures)]


def job_ratios(body, is_job, ratio, label):
    """The ratio column of a section's job rows and their `label` column: two lists."""
    jobs = [r for t in tables(body) for r in t if is_job(r.get("case", ""))]
    return [r[ratio] for r in jobs], [r[label] for r in jobs]


def k_target(body):
    target = "K: ≥ 0.8 of raw consume + produce"
    ratios, labels = job_ratios(body, lambda case: case.startswith("job"), "/ baseline", "case")
    if not ratios:
        return (target, "not measured", "–")
    return (target, joined(ratios) + " (" + " / ".join(labels) + ")",
            verdict([number(x) >= 0.8 for x in ratios], labels))


def s_target(s_body, sp_body):
    """S's committed models, then SP's production-sized ones when measured."""
    target = "S: ≥ 0.9 of raw `ort`, each model"
    parts, oks, names = [], [], []
    for body, what, prefix in [(s_body, "the committed models", ""),
                               (sp_body, "production-sized (SP)", "SP ")]:
        ratios, labels = job_ratios(body, lambda case: case == "job", "/ raw_ort", "model")
        if ratios:
            parts.append(f"{joined(ratios)} ({' / '.join(labels)}; {what})")
            oks += [number(x) >= 0.9 for x in ratios]
            names += [prefix + label for label in labels]
    if not parts:
        return (target, "not measured", "–")
    return (target, "; ".join(parts), verdict(oks, names))


def l_figures(body):
    """(p99, p99.9) of each table's 50 % window close → score acknowledged row."""
    found = []
    for table in tables(body):
        for r in table:
            if r.get("load", "").startswith("50 %") and r.get("latency", "").startswith("window close"):
                found.append((r["p99 ms"], r["p99.9 ms"]))
    return found


def l_target(l_body, lf_body):
    tansu, fast = l_figures(l_body), l_figures(lf_body)
    parts, oks, labels = [], [], []
    if tansu:
        p99, p999 = tansu[0]
        parts.append(f"{p99} ms on tansu (p99.9 {p999})")
        oks.append(number(p99) <= 5)
        labels.append("tansu only")
    if fast:
        # LF's tables: the job's defaults, then the settings tuned for latency.
        p99, p999 = fast[-1]
        text = f"{p99} ms on a fast broker tuned for latency (p99.9 {p999})"
        if len(fast) > 1:
            text += f", {fast[0][0]} with the defaults"
        parts.append(text)
        oks.append(number(p99) <= 5)
        labels.append("fast broker only")
    if not parts:
        return (L_TARGET, "not measured", "–")
    return (L_TARGET, "; ".join(parts), verdict(oks, labels))


def m_target(body):
    rows = {r.get("state"): r for t in tables(body) for r in t}
    found = [rows.get(kind) for kind in KINDS]
    if None in found:
        return (M_TARGET, "not measured", "–")
    per_window = [r["bytes per open (key, window)"] for r in found]
    per_slot = [r["bytes per open slot"] for r in found]
    return (M_TARGET,
            joined(per_window) + " (tumbling / hopping / session); per open slot "
            + joined(per_slot),
            verdict([number(b) <= 100 for b in per_window],
                    ["tumbling", "hopping on its input", "session"]))


def block(text):
    bodies = {name: section(text, name) for name in ["F", "K", "S", "SP", "L", "LF", "M"]}
    rows = f_targets(bodies["F"]) + [
        k_target(bodies["K"]),
        s_target(bodies["S"], bodies["SP"]),
        l_target(bodies["L"], bodies["LF"]),
        m_target(bodies["M"]),
    ]
    sections = ["F"] * 4 + ["K", "S, SP" if bodies["SP"] else "S", "L, LF", "M"]
    runs = [f"- {name}: {provenance(body)}" for name, body in bodies.items() if provenance(body)]
    out = [
        "Written by `scripts/bench_targets.py` from the tables below (`scripts/bench.sh` runs it;",
        "CI checks it): each target's latest figure and whether it is met. Each section holds",
        "what limits a missed target and what was tried. The runs:",
        *runs,
        "",
        "| target | latest | met? | section |",
        "|---|---|---|---|",
    ]
    out += [f"| {target} | {latest} | {met} | {where} |"
            for (target, latest, met), where in zip(rows, sections)]
    return "\n".join(out) + "\n"


def main():
    text = open(PATH).read()
    if "--check" in sys.argv[1:]:
        # As bench.sh's write_section leaves it: a newline after the opening mark.
        if section(text, "targets") != "\n" + block(text):
            sys.exit(f"{PATH}: the targets at a glance differ from the sections' tables; "
                     "rewrite them with `bash scripts/bench.sh targets` (runs no benchmark)")
        return
    sys.stdout.write(block(text))


if __name__ == "__main__":
    main()
