"""Print one replayed decode step's kernel timeline from an nsys SQLite export.

Usage: python3 bench/nsys_step.py REPORT.sqlite [MARKER]

The step is the last complete run of kernels from one kernel whose name
contains MARKER (default "embedding", the step's first) to the next. Each
kernel is printed with its start and end in microseconds from the step's
first kernel, its duration and the gap since the latest end so far (negative:
it overlapped the kernels before it, as dependent launches do). When the
report holds GPU metrics, every DRAM and SM-activity sample inside the step
is printed after the kernels, one line a sample.
"""
import sqlite3
import sys


def tables(db):
    return {r[0] for r in db.execute("select name from sqlite_master where type='table'")}


def main():
    db = sqlite3.connect(sys.argv[1])
    marker = sys.argv[2] if len(sys.argv) > 2 else "embedding"
    names = dict(db.execute("select id, value from StringIds"))
    rows = db.execute(
        "select start, end, shortName from CUPTI_ACTIVITY_KIND_KERNEL order by start").fetchall()
    starts = [i for i, r in enumerate(rows) if marker in names.get(r[2], "")]
    if len(starts) < 2:
        print("fewer than two kernels named like %r" % marker)
        return
    step = rows[starts[-2]:starts[-1]]
    t0 = step[0][0]
    print("step: %d kernels, %.2f us" % (len(step), (step[-1][1] - t0) / 1e3))
    latest = t0
    busy = {}
    for s, e, n in step:
        name = names.get(n, str(n))
        print("%9.2f %9.2f %7.2f %7.2f %s" % ((s - t0) / 1e3, (e - t0) / 1e3, (e - s) / 1e3, (s - latest) / 1e3, name))
        latest = max(latest, e)
        busy[name] = busy.get(name, 0) + (e - s)
    print("by kernel (sum of durations, us):")
    for name, d in sorted(busy.items(), key=lambda kv: -kv[1]):
        print("  %9.2f %s" % (d / 1e3, name))
    if "GPU_METRICS" not in tables(db):
        print("no GPU metrics in the report")
        return
    metric = dict(db.execute("select metricId, metricName from TARGET_INFO_GPU_METRICS"))
    keep = {k: v for k, v in metric.items() if "DRAM" in v or "SMs Active" in v or "SM Active" in v}
    print("metrics:", "; ".join("%d=%s" % kv for kv in sorted(keep.items())))
    samples = {}
    q = "select timestamp, metricId, value from GPU_METRICS where timestamp between ? and ? order by timestamp"
    for ts, mid, v in db.execute(q, (t0, step[-1][1])):
        if mid in keep:
            samples.setdefault(ts, {})[mid] = v
    ids = sorted(keep)
    print("t_us " + " ".join(str(i) for i in ids))
    for ts in sorted(samples):
        print("%8.2f " % ((ts - t0) / 1e3) + " ".join(str(samples[ts].get(i, "")) for i in ids))


if __name__ == "__main__":
    main()
