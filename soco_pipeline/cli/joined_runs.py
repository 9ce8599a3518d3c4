"""Stages that run together: `soco run` materializes a model's rows of every family in one Dagster run (all
its assets share the model's partition) and every board with the summary in another, instead of a run per
stage (each run's launch, events and step-process start cost 0.5-1 s; steps of different families overlap on
the executor's processes). Each stage still gets its own status and seconds, from the run's step events."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg

    from soco_pipeline.cli.demo import Runner, Stage


def step_spans(instance: dg.DagsterInstance, run_id: str) -> dict[str, tuple[float, float]]:
    """{step key: (start, end) timestamps} of one run's finished steps, from Dagster's event log."""
    import dagster as dg

    kinds = {
        dg.DagsterEventType.STEP_START,
        dg.DagsterEventType.STEP_SUCCESS,
        dg.DagsterEventType.STEP_FAILURE,
    }
    start, out = {}, {}
    for entry in instance.all_logs(run_id, of_type=kinds):
        event = entry.dagster_event
        if event.event_type == dg.DagsterEventType.STEP_START:
            start[event.step_key] = entry.timestamp
        elif event.step_key in start:
            out[event.step_key] = (start[event.step_key], entry.timestamp)
    return out


def joined(stages: Sequence[Stage], job: str) -> Stage:
    """One stage that materializes every asset of `stages` (one partition, or none) in a run of job `job`."""
    keys = list(dict.fromkeys(k for s in stages for k in s.keys))
    ops = {op: config for s in stages for op, config in s.ops.items()}
    tags = {tag: value for s in stages for tag, value in s.tags.items()}
    label = ", ".join(s.label for s in stages)
    return dataclasses.replace(stages[0], label=label, job=job, keys=keys, ops=ops, tags=tags)


def run_joined(
    runner: Runner, defs: dg.Definitions, stages: Sequence[Stage], job: str
) -> list[tuple[bool, float]]:
    """Run `stages` in one run of `job` (those the runner skips as fresh left out; one stage: its own run and
    job); per stage, whether it succeeded (or was skipped) and the seconds its own steps took (their sum). A stage whose step failed, or whose steps did not run because a step they need failed,
    is recorded in `runner.failed` under its own label."""
    import time

    skipped = [runner.skipped(s) for s in stages]
    todo = [s for s, skip in zip(stages, skipped, strict=True) if not skip]
    if len(todo) == 1:
        t0 = time.perf_counter()
        results = [(runner.launch(todo[0]), time.perf_counter() - t0)]
    else:
        results = run_together(runner, defs, todo, job) if todo else []
    return [(True, 0.0) if skip else results.pop(0) for skip in skipped]


def run_together(
    runner: Runner, defs: dg.Definitions, stages: Sequence[Stage], job: str
) -> list[tuple[bool, float]]:
    """`run_joined` of two or more stages, none of them skipped."""
    together = joined(stages, job)
    ok = runner.launch(together, members=[s.label for s in stages])
    spans = step_spans(runner.instance, runner.last_run_id) if runner.last_run_id else {}
    reason = runner.failed.pop(together.label, None)
    out = []
    for stage in stages:
        steps = {defs.resolve_assets_def(k).node_def.name for k in stage.keys}
        mine = [spans[s] for s in steps if s in spans]
        seconds = sum(b - a for a, b in mine)
        errors = [f"step {s}: {runner.last_errors[s]}" for s in sorted(steps) if s in runner.last_errors]
        if ok or (not errors and len(mine) == len(steps)):
            out.append((True, seconds))
            continue
        runner.failed[stage.label] = errors[0] if errors else f"not run: {reason}"
        out.append((False, seconds))
    return out
