"""``memcore bench`` outputs: results.json, a Markdown table, and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memcore.bench.dataset import SELECTIVITIES
from memcore.bench.overhead import OPERATIONS as OVERHEAD_OPERATIONS

CASES = ("all", *(f"scope-{p}%" for p in SELECTIVITIES), *(f"filter-{p}%" for p in SELECTIVITIES))


def write_json(results: dict[str, Any], folder: Path) -> Path:
    """``results.json``: the machine, versions, command, and every figure."""
    path = folder / "results.json"
    path.write_text(json.dumps(results, indent=2))
    return path


def markdown_table(results: dict[str, Any]) -> str:
    """One row per store and size, and one per size for the numpy floor; latencies are p50 in ms.

    ``x floor`` is the store's p50 over the floor's p50 for the scoped 10 % case,
    measured in the same run: a ratio that holds across machines. ``x data`` is the load's
    peak memory growth over the bytes of the vectors and message texts written.
    """
    header = [
        "store",
        "records",
        "insert/s",
        *(f"{case} p50" for case in CASES),
        "recall@10",
        "delete p50",
        "x floor (scope-10%)",
        "load peak MiB",
        "bytes/record",
        "x data",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in results["runs"]:
        search, floor = run["search"], run["floor"]
        ratio = search["scope-10%"]["p50_ms"] / max(floor["scope-10%"]["p50_ms"], 1e-6)
        cells = [run["store"], str(run["size"]), str(run["insert_records_per_s"])]
        cells += [f"{search[case]['p50_ms']:.2f}" for case in CASES]
        cells += [f"{search['recall_at_10']:.3f}", f"{run['delete']['p50_ms']:.2f}", f"{ratio:.2f}"]
        cells += _memory_cells(run)
        lines.append("| " + " | ".join(cells) + " |")
    for run in _one_run_per_size(results["runs"]):
        cells = ["numpy floor", str(run["size"]), "-", *(f"{run['floor'][c]['p50_ms']:.2f}" for c in CASES)]
        lines.append("| " + " | ".join([*cells, "1.000", "-", "1.00", "-", "-", "-"]) + " |")
    if results.get("adapter_overhead"):
        lines += [
            "",
            "Adapter overhead: median over paired samples of memcore's time / the raw client's "
            "(memcore ms / raw ms, medians)",
            "",
            "| store | " + " | ".join(OVERHEAD_OPERATIONS) + " |",
            "|---|" + "---|" * len(OVERHEAD_OPERATIONS),
        ]
        for row in results["adapter_overhead"]:
            cells = [
                f"{row[op]['ratio']:.2f}x ({row[op]['memcore_ms']:.2f} / {row[op]['raw_ms']:.2f})"
                for op in OVERHEAD_OPERATIONS
            ]
            lines.append(f"| {row['store']} | " + " | ".join(cells) + " |")
    if results.get("many_tenants"):
        lines += ["", "| store | tenants x records | scoped search p50 | p99 |", "|---|---|---|---|"]
        for row in results["many_tenants"]:
            size = f"{row['tenants']} x {row['records_per_tenant']}"
            lines.append(f"| {row['store']} | {size} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} |")
    if results.get("agent_loop"):
        lines += [
            "",
            "| store | recall | turns | turns/s | reference turns/s | write ratio | get_context p50 | p99 "
            "| reference p50 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in results["agent_loop"]:
            context = row["get_context"]
            lines.append(
                f"| {row['store']} | {row['recall']} | {row['turns']} | {row['turns_per_s']} "
                f"| {row['reference_turns_per_s']} "
                f"| {row['write_ratio']:.2f} | {context['p50_ms']:.2f} | {context['p99_ms']:.2f} "
                f"| {row['reference_get_context']['p50_ms']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def _memory_cells(run: dict[str, Any]) -> list[str]:
    """Load peak MiB, bytes per record, and the peak over the data's bytes ("-" where unmeasured)."""
    peak = run["peak_rss_growth_mb"]
    if peak is None:
        return ["-", "-", "-"]
    data = run.get("data_bytes")
    ratio = f"{peak * 2**20 / data:.2f}" if data else "-"
    return [str(peak), f"{peak * 2**20 / run['size']:.0f}", ratio]


def _one_run_per_size(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[int, dict[str, Any]] = {}
    for run in runs:
        seen.setdefault(run["size"], run)
    return list(seen.values())


def write_plots(results: dict[str, Any], folder: Path) -> list[Path]:
    """``latency.png`` (p50 against size, per store), ``selectivity.png`` (p50 against selectivity)
    and ``recall.png`` (recall@10 per store and size)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    stores = sorted({run["store"] for run in runs})
    paths = []
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for store in stores:
        mine = sorted((run for run in runs if run["store"] == store), key=lambda run: run["size"])
        axes.plot(
            [r["size"] for r in mine], [r["search"]["scope-10%"]["p50_ms"] for r in mine], "o-", label=store
        )
    floors = _one_run_per_size(runs)
    axes.plot(
        [r["size"] for r in floors],
        [r["floor"]["scope-10%"]["p50_ms"] for r in floors],
        "k--",
        label="numpy floor",
    )
    axes.set(xscale="log", yscale="log", xlabel="records", ylabel="scoped search (10 %) p50, ms")
    axes.legend(fontsize=8)
    paths.append(_save(figure, folder / "latency.png"))
    largest = max(run["size"] for run in runs)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for store in stores:
        run = next(r for r in runs if r["store"] == store and r["size"] == largest)
        for kind, style in (("scope", "o-"), ("filter", "s:")):
            values = [run["search"][f"{kind}-{p}%"]["p50_ms"] for p in SELECTIVITIES]
            axes.plot(SELECTIVITIES, values, style, label=f"{store} ({kind})")
    axes.set(xscale="log", xlabel="selectivity, % of records", ylabel=f"search p50 at {largest} records, ms")
    axes.legend(fontsize=7)
    paths.append(_save(figure, folder / "selectivity.png"))
    figure, axes = plt.subplots(figsize=(7, 4.5))
    sizes = sorted({run["size"] for run in runs})
    width = 0.8 / len(stores)
    for offset, store in enumerate(stores):
        recall = {r["size"]: r["search"]["recall_at_10"] for r in runs if r["store"] == store}
        positions = [i + offset * width for i, size in enumerate(sizes) if size in recall]
        axes.bar(positions, [recall[size] for size in sizes if size in recall], width, label=store)
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(sizes))], [str(size) for size in sizes])
    axes.set(xlabel="records", ylabel="recall@10 against exact search", ylim=(0, 1.05))
    axes.legend(fontsize=7, loc="lower left")
    paths.append(_save(figure, folder / "recall.png"))
    return paths


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path


def locomo_table(locomo: dict[str, Any]) -> str:
    """Recall@1/5/10 per LoCoMo category and overall for each recall mode, as a Markdown table."""
    modes = locomo["modes"]
    latency = ", ".join(f"{mode} {row['recall_p50_ms']} ms" for mode, row in modes.items())
    lines = [
        f"LoCoMo turn-level recall, {locomo['questions']} questions, embedder {locomo['embedder']}; "
        f"recall p50 (the query's embedding excluded): {latency}; evidence ids repaired "
        f"{locomo['evidence_repaired']}, dropped {locomo['evidence_dropped']}",
        "",
        "| category | " + " | ".join(f"{mode} @1 | {mode} @5 | {mode} @10" for mode in modes) + " |",
        "|---|" + "---|" * (3 * len(modes)),
    ]
    order = ["multi-hop", "temporal", "open-domain", "single-hop", "adversarial", "overall"]
    names = sorted(modes["dense"]["recall"], key=lambda name: order.index(name) if name in order else 0)
    for name in names:
        cells = [f"{modes[mode]['recall'][name][f'recall@{k}']:.3f}" for mode in modes for k in (1, 5, 10)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
