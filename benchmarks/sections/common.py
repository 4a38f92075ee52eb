"""What the sections share: the target device, the goals of issue 19 and the
checks against them, the Markdown tables."""

import os
import statistics

import torch_accel

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCHMARKS)
# The driver: the instructions section runs it again under callgrind.
RUN_PY = os.path.join(BENCHMARKS, "run.py")

TARGET = torch_accel._target_device_type()


# The goals of issue 19 for accel/target ratios of the per-op list (time and
# instructions): the median, and every op on the host runtime. A ratio above
# its goal is printed as a warning and listed in the results.
GOALS = {"cpu": {"median": 1.10, "worst": 1.25}, "cuda": {"median": 1.05, "worst": None}}
# `import torch_accel` may add at most this to `import torch` (ms).
IMPORT_GOAL_MS = 30.0


def ratio_summary(rows: list[dict]) -> dict:
    """The median and worst ratio of a per-op table, and the ops above the goals."""
    ratios = [r["ratio"] for r in rows]
    goals = GOALS.get(TARGET, GOALS["cpu"])
    worst = max(rows, key=lambda r: r["ratio"])
    over = [r["op"] for r in rows if goals["worst"] is not None and r["ratio"] > goals["worst"]]
    return {"median": statistics.median(ratios), "worst": worst["ratio"], "worst_op": worst["op"], "over_goal": over}


def per_op_goal_warnings(section: str, what: str, results: dict) -> list[str]:
    """One line for every ratio of the per-op table `section` (measured in
    `what`) above its goal (issue 19)."""
    goals = GOALS.get(TARGET, GOALS["cpu"])
    found = []
    if section in results:
        summary = results[f"{section}_summary"]
        if summary["median"] > goals["median"]:
            found.append(f"{what}: median accel/{TARGET} {summary['median']:.3f} is above its goal {goals['median']:.2f}")
        for row in results[section]:
            if goals["worst"] is not None and row["ratio"] > goals["worst"]:
                found.append(f"{what}: {row['op']} accel/{TARGET} {row['ratio']:.3f} is above the per-op goal {goals['worst']:.2f}")
    return found


def warnings_markdown(warnings: list[str]) -> list[str]:
    return ["", *(f"- **above goal**: {w}" for w in warnings)] if warnings else []


def table(rows: list[dict], columns: list[str]) -> list[str]:
    def fmt(value):
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
        return "" if value is None else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(row.get(c)) for c in columns) + " |" for row in rows]
    return lines
