"""Where a GPU step's time goes: the kernels of an Nsight Compute CSV log
(ncu --metrics gpu__time_duration.sum --csv --log-file FILE), grouped by
kernel name (template arguments and parameters cut), largest first.

Usage: ncu_top.py CSV [N]   (N rows, default 10; CSV may be gzip'd)
Prints a header line "total T ms in K kernels", a line "by owner: cdl
A ms (P%), cudnn B ms (Q%), cublas C ms (R%)" and one line per group,
"MS|PERCENT|CALLS|OWNER: NAME", the owner named: cuDNN's and cuBLAS's kernels by
their library (cudnn, cublas: nvjet, cutlass, xmma, gemv), cdl's own by
their name. Exit 1 when the log holds no kernel times (ncu failed)."""
import csv
import gzip
import re
import sys
from collections import defaultdict

UNITS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0,
         "msecond": 1.0, "s": 1e3, "second": 1e3}


def owner(name):
    """cdl's kernel, or the library a vendor kernel comes from."""
    low = name.lower()
    if "cudnn" in low or re.search(r"xmma_(fprop|dgrad|wgrad)", low):
        return "cudnn"
    if re.search(r"nvjet|cutlass|cublas|gemv|gemm|splitkreduce", low):
        return "cublas"
    return "cdl"


def short(name):
    """The kernel's name without parameters and template arguments."""
    name = re.sub(r"\(.*$", "", name.strip())
    name = re.sub(r"^void ", "", name)
    return re.sub(r"<.*>", "", name)[:70]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: ncu_top.py CSV [N]")
    top = int(sys.argv[2]) if len(sys.argv) == 3 else 10
    path = sys.argv[1]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]   # ncu's own ==PROF== lines left out
    groups = defaultdict(lambda: [0.0, 0])
    total, kernels = 0.0, 0
    rows = csv.DictReader(lines)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = UNITS.get(r.get("Metric Unit", ""))
        if unit is None:
            sys.exit(f"ncu_top.py: {path}: unknown unit '{r.get('Metric Unit')}'")
        ms = float(r["Metric Value"].replace(",", "")) * unit
        g = groups[(owner(r["Kernel Name"]), short(r["Kernel Name"]))]
        g[0] += ms
        g[1] += 1
        total += ms
        kernels += 1
    if kernels == 0:
        sys.exit(f"ncu_top.py: {path}: no gpu__time_duration.sum values (did ncu run?)")
    print(f"total {total:.2f} ms in {kernels} kernels")
    owners = defaultdict(float)
    for (who, _), (ms, _) in groups.items():
        owners[who] += ms
    print("by owner: " + ", ".join(f"{who} {owners[who]:.2f} ms ({100 * owners[who] / total:.0f}%)"
                                   for who in ("cdl", "cudnn", "cublas") if who in owners))
    for (who, name), (ms, calls) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{ms:.2f}|{100 * ms / total:.1f}|{calls}|{who}: {name}")


if __name__ == "__main__":
    main()
