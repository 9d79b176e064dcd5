"""Joins benches/suite.rs's criterion samples with scripts/peers/suite.py's
JSON into the markdown table of docs/benchmarks.md: per workload and
discipline the median (and best) per-call time of ours and XLA's, their
ratio (target ≤ 1.0), the compile times and XLA's over ours (target ≥ 20),
and our first call against XLA's compile alone (target ≤ 1.0). Checksums
(sums of the outputs) that differ by more than 1e-5 of the sum of the
outputs' magnitudes are flagged: the two sides would not be computing
the same thing (f32 sums in another order differ by less).

    python3 scripts/suite_table.py [--plot JSON WINDOW] [JAX_JSON] [CRITERION_DIR] [CHECKSUMS]
(defaults: target/suite/jax.json target/criterion target/suite/checksums.json).
With --plot, also writes the medians with outputs dropped as JSON for
scripts/plot_benchmarks.py (WINDOW names the time of the run):

    python3 scripts/suite_table.py --plot docs/suite.json "2026-11-25 18:21-18:34 UTC"
    python3 scripts/plot_benchmarks.py docs/suite.json docs/suite.svg
"""
import json
import pathlib
import statistics
import sys

args = sys.argv[1:]
plot = None
if args[:1] == ["--plot"]:
    plot, window = args[1], args[2]
    args = args[3:]
args += [None] * 3
jax_path = pathlib.Path(args[0] or "target/suite/jax.json")
crit = pathlib.Path(args[1] or "target/criterion")
sums = json.loads(pathlib.Path(args[2] or "target/suite/checksums.json").read_text())
peer = json.loads(jax_path.read_text())


def ours(name, kind):
    family, size = name.split("/", 1)
    path = crit / f"suite_{family}" / kind / size / "new" / "sample.json"
    if not path.exists():
        return None
    s = json.loads(path.read_text())
    per_call = [t / n / 1e9 for t, n in zip(s["times"], s["iters"])]
    return {"median": statistics.median(per_call), "best": min(per_call)}


def ms(d):
    return "%.3g (%.3g)" % (d["median"] * 1e3, d["best"] * 1e3)


print(f"JAX {peer['jax']}; ms, median (best) of 10 samples; × = ours / XLA on the medians\n")
print("| workload | dropped: ours | XLA | × | kept: ours | XLA | × | compile: ours | XLA | XLA ÷ ours | first call: ours | ÷ XLA compile | XLA first call |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, r in peer["workloads"].items():
    cells = [name]
    for kind in ("dropped", "kept"):
        o = ours(name, kind)
        if o is None:
            cells += ["–", ms(r[kind]), "–"]
        else:
            cells += [ms(o), ms(r[kind]), "%.2f" % (o["median"] / r[kind]["median"])]
    oc, of = ours(name, "compile"), ours(name, "first_call")
    cells += [ms(oc) if oc else "–", ms(r["compile"]),
              "%.0f" % (r["compile"]["median"] / oc["median"]) if oc else "–"]
    cells += [ms(of) if of else "–",
              "%.2f" % (of["median"] / r["compile"]["median"]) if of else "–",
              ms(r["first_call"])]
    mine, theirs = sums.get(name), r["checksum"]
    if mine is None or abs(mine[0] - theirs[0]) > 1e-5 * max(1.0, theirs[1]):
        cells[0] += f" (checksums differ: {mine} vs {theirs})"
    print("| " + " | ".join(cells) + " |")

if plot:
    series = {}
    for name, r in peer["workloads"].items():
        o = ours(name, "dropped")
        if o is not None:
            series[name] = {"tensorlift JIT": round(o["median"] * 1e3, 4),
                            "XLA": round(r["dropped"]["median"] * 1e3, 4)}
    pathlib.Path(plot).write_text(json.dumps(
        {"window": f"{window}, outputs dropped, medians", "unit": "ms", "workloads": series}, indent=2) + "\n")
