#!/usr/bin/env python3
"""Draws docs/benchmarks.svg from docs/benchmarks.json: one group of
horizontal bars per workload (log-scale time, shorter is better) for
tensorlift's JIT, XLA, NumPy and our interpreter. Standard library only.

    python3 scripts/plot_benchmarks.py [docs/benchmarks.json] [docs/benchmarks.svg]
"""
import json
import math
import sys

COLORS = {
    "tensorlift JIT": "#d62728",
    "XLA": "#1f77b4",
    "NumPy": "#2ca02c",
    "our interpreter": "#7f7f7f",
}


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "docs/benchmarks.json"
    dst = sys.argv[2] if len(sys.argv) > 2 else "docs/benchmarks.svg"
    data = json.load(open(src))
    work = data["workloads"]
    values = [v for w in work.values() for v in w.values()]
    lo = 10 ** math.floor(math.log10(min(values)))
    hi = 10 ** math.ceil(math.log10(max(values)))
    left, width, bar, gap = 170, 560, 11, 14
    x = lambda v: left + width * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    rows = sum(len(w) for w in work.values())
    height = 60 + rows * bar + len(work) * gap + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 110}" height="{height}" font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="18" font-size="13">Time per call, {data["unit"]}, log scale (shorter is better) — {data["window"]}</text>',
    ]
    y = 40
    for e in range(round(math.log10(lo)), round(math.log10(hi)) + 1):
        gx = x(10 ** e)
        out.append(f'<line x1="{gx:.1f}" y1="{y - 6}" x2="{gx:.1f}" y2="{height - 40}" stroke="#ddd"/>')
        out.append(f'<text x="{gx:.1f}" y="{y - 8}" text-anchor="middle" fill="#555">{10 ** e:g}</text>')
    for name, series in work.items():
        out.append(f'<text x="{left - 8}" y="{y + bar * len(series) / 2 + 4:.1f}" text-anchor="end">{name}</text>')
        for label, v in series.items():
            w = max(x(v) - left, 1)
            out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 2}" fill="{COLORS[label]}"/>')
            out.append(f'<text x="{left + w + 4:.1f}" y="{y + bar - 3}" fill="#333">{v:g}</text>')
            y += bar
        y += gap
    lx = left
    present = {label for w in work.values() for label in w}
    for label, c in COLORS.items():
        if label not in present:
            continue
        out.append(f'<rect x="{lx}" y="{height - 28}" width="10" height="10" fill="{c}"/>')
        out.append(f'<text x="{lx + 14}" y="{height - 19}">{label}</text>')
        lx += 130
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
