"""What memcore's OpenTelemetry spans cost on ``memcore bench --quick``'s agent loop.

    .venv/bin/python benchmarks/telemetry_overhead.py                 # hash embedder, 15 rounds
    .venv/bin/python benchmarks/telemetry_overhead.py --rounds 5 \
        --embedder sentence-transformers/all-MiniLM-L6-v2

Runs the agent loop of ``memcore bench --quick`` (two agents, 400 turns written, 20 questions
each followed by ``get_context()``, on ``memory://``) in rounds; each round runs every tracing
mode once, in an order that rotates from round to round, so that a noisy machine slows each
mode alike. Modes:

* ``bare``: every instrumented method replaced by the function it wraps, memcore as it was
  before tracing existed: the baseline of the ratios;
* ``none``: ``memcore.telemetry.uninstrument()``, the path taken without ``opentelemetry-api``;
* ``noop``: the API installed and no SDK configured, memcore's default (OpenTelemetry's
  no-op tracer behind the global proxy);
* ``sdk``: the SDK's ``TracerProvider`` recording every span, exporting none (an upper bound of
  the in-process cost; exporters add their own).

It prints, per mode, the median over rounds of the loop's wall time, of the ``get_context`` p50
and of the write throughput, and each mode's ratio to ``none``: the median of the ratios of
the rounds (a round's runs follow each other, so a slow spell of the machine hits both). The
hash embedder (default) costs microseconds, so memcore's own work, and the spans' share of it,
dominates; MiniLM's milliseconds per turn dilute it.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from typing import Any

from memcore import telemetry
from memcore.bench.agent_loop import run_agent_loop
from memcore.bench.progress import no_progress
from memcore.plugins import open_embedder

MODES = ("bare", "none", "noop", "sdk")


def _instrumented_methods() -> list[tuple[type, str, Any]]:
    """Every traced method memcore's classes define: (class, name, the wrapper)."""
    from memcore.agent.memories import AgentMemory
    from memcore.embedders.base import OffLoopEmbedding
    from memcore.embedders.cache import CachedEmbedder
    from memcore.store import BaseStore

    found, pending, seen = [], [BaseStore, AgentMemory, OffLoopEmbedding, CachedEmbedder], set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        pending += cls.__subclasses__()
        traced = [(name, attr) for name, attr in vars(cls).items() if getattr(attr, "memcore_traced", False)]
        found += [(cls, name, attr) for name, attr in traced]
    return found


INSTRUMENTED = _instrumented_methods()


def _set_mode(mode: str) -> None:
    for cls, name, wrapper in INSTRUMENTED:
        setattr(cls, name, wrapper.__wrapped__ if mode == "bare" else wrapper)
    if mode in ("bare", "none"):
        telemetry.uninstrument()
    elif mode == "noop":
        telemetry.instrument()  # the global provider: none is set in this process
    else:
        from opentelemetry.sdk.trace import TracerProvider

        telemetry.instrument(TracerProvider())


def _round(mode: str, embedder_name: str, turns: int, questions: int) -> dict[str, float]:
    _set_mode(mode)
    embedder = open_embedder(embedder_name)  # a fresh cache each run: every run embeds alike
    gc.collect()  # no run pays for the garbage of the one before (the SDK's spans)
    started = time.perf_counter()
    result = run_agent_loop("memory://", embedder, turns, questions, no_progress)
    return {
        "seconds": time.perf_counter() - started,
        "get_context_p50_ms": result["get_context"]["p50_ms"],
        "turns_per_s": result["turns_per_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--embedder", default="hash")
    parser.add_argument("--turns", type=int, default=400, help="as memcore bench --quick")
    parser.add_argument("--questions", type=int, default=20, help="as memcore bench --quick")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", action="store_true", help="print the medians as JSON")
    args = parser.parse_args()
    modes = args.modes.split(",")
    _round("bare", args.embedder, args.turns, args.questions)  # warm-up: imports, caches
    samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for index in range(args.rounds):
        shift = index % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            samples[mode].append(_round(mode, args.embedder, args.turns, args.questions))
    telemetry.reset()
    medians: dict[str, dict[str, Any]] = {
        mode: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for mode, runs in samples.items()
    }
    base = medians.get("bare")
    print(
        f"agent loop, memory://, {args.embedder}, {args.turns} turns, {args.questions} questions, "
        f"{args.rounds} rounds (medians; ratio: the median of each round's ratio to bare)"
    )
    print("| mode | loop s | ratio | get_context p50 ms | ratio | turns/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for mode, median in medians.items():
        ratios = [float("nan")] * 3
        if base is not None:
            pairs = list(zip(samples[mode], samples["bare"], strict=True))
            ratios = [
                statistics.median(ours["seconds"] / theirs["seconds"] for ours, theirs in pairs),
                statistics.median(
                    ours["get_context_p50_ms"] / theirs["get_context_p50_ms"] for ours, theirs in pairs
                ),
                statistics.median(theirs["turns_per_s"] / ours["turns_per_s"] for ours, theirs in pairs),
            ]
        median["ratios"] = ratios
        print(
            f"| {mode} | {median['seconds']:.3f} | {ratios[0]:.3f} | {median['get_context_p50_ms']:.3f} | "
            f"{ratios[1]:.3f} | {median['turns_per_s']:.1f} | {ratios[2]:.3f} |"
        )
    if args.json:
        print(json.dumps(medians, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
