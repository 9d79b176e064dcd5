"""Prints the median of every criterion benchmark under target/criterion."""
import json, pathlib, sys
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
for est in sorted(root.glob("**/new/estimates.json")):
    name = "/".join(est.parts[len(root.parts):-2])
    med = json.loads(est.read_text())["median"]["point_estimate"]
    unit, div = ("ms", 1e6) if med >= 1e6 else ("us", 1e3)
    print(f"{name:45s} {med/div:10.3f} {unit}")
