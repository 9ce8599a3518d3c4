"""The executor per profile: local (multiprocess, steps forked from a preloaded forkserver) or distributed."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from soco_pipeline.settings import variable

PROFILES = ("local", "distributed")
GPU_QUEUE = "gpu"
# Steps in the `gpu` pool carry this tag: dagster-celery sends them to the queue only GPU workers consume.
GPU_STEP_TAGS = {"dagster-celery/queue": GPU_QUEUE}


# Imported once per run by the forkserver instead of once per step: the pipeline, torch and Dagster's storage
# layer (soco_pipeline/runtime/worker_preload.py also ties each step to its run's process). Not a backbone kind's own
# library (timm: 2.4 s of the 8.3 s), which only that kind's steps import.
PRELOAD = [
    "soco_pipeline.runtime.worker_preload",
    "soco_pipeline.defs.definitions",
    "torch",
    "soco_pipeline.features",
    "soco_pipeline.pairs",
    "soco_pipeline.pairs.four_choice",
    "soco_pipeline.sources",
    "soco_pipeline.evaluation.matching",
    "soco_pipeline.evaluation.four_choice_matching",
    "soco_pipeline.evaluation.metrics",
    "soco_pipeline.analysis.leaderboard",
    "soco_pipeline.report.results_db",
    "soco_pipeline.analysis",
]


# The multiprocess executor's `start_method` config: a forkserver that preloads PRELOAD.
FORKSERVER = {"forkserver": {"preload_modules": PRELOAD}}


# A run whose every step is so tagged (boards, summaries) runs them in its own process with no forkserver
# (its preload was 7 s of a 17 s refresh of the boards).
IN_RUN_PROCESS = {"soco/step_process": "run"}


def profile() -> str:
    """The deployment profile from $SOCO_PROFILE (local | distributed)."""
    name = variable("SOCO_PROFILE") or "local"
    if name not in PROFILES:
        raise ValueError(f"SOCO_PROFILE={name!r} is not a deployment profile; use one of {PROFILES}")
    return name


def with_forkserver_default(config: dict) -> dict:
    """`multi_or_in_process_executor` config with FORKSERVER where it names no start method."""
    multiprocess = config.get("multiprocess")
    if not isinstance(multiprocess, dict) or multiprocess.get("start_method"):
        return config
    return {**config, "multiprocess": {**multiprocess, "start_method": FORKSERVER}}


def wrapped_executor(
    inner: dg.ExecutorDefinition, create: Callable[[dg.InitExecutorContext], dg.Executor], note: str
) -> dg.ExecutorDefinition:
    """`inner` under its own name, schema and requirements, built by `create`, with `note`."""
    return dg.ExecutorDefinition(
        name=inner.name,
        config_schema=inner.config_schema,
        requirements=inner.get_requirements,
        executor_creation_fn=create,
        description=f"{inner.description or inner.name}; {note}",
    )


class LightRunsInProcess(dg.Executor):
    """The multiprocess executor, but in the run's process when every step is tagged IN_RUN_PROCESS."""

    def __init__(self, multiprocess: dg.Executor, in_process: dg.Executor):
        self.multiprocess, self.in_process = multiprocess, in_process

    @property
    def retries(self):
        """The multiprocess executor's retry mode (the in-process one has the same)."""
        return self.multiprocess.retries

    @property
    def step_dependency_config(self):
        """The multiprocess executor's step dependency settings."""
        return self.multiprocess.step_dependency_config

    def execute(self, plan_context, execution_plan):
        """Run the plan in this process when every step is light, else from the forkserver."""
        steps = [execution_plan.get_step_by_key(k) for k in execution_plan.step_keys_to_execute]
        light = bool(steps) and all(IN_RUN_PROCESS.items() <= (step.tags or {}).items() for step in steps)
        return (self.in_process if light else self.multiprocess).execute(plan_context, execution_plan)


def forkserver_by_default(inner: dg.ExecutorDefinition) -> dg.ExecutorDefinition:
    """`inner` starting steps from the preloaded forkserver, IN_RUN_PROCESS plans in the run's process."""

    def create(init_context: dg.InitExecutorContext) -> dg.Executor:
        config = dict(init_context.executor_config)

        def build(executor_config: dict) -> dg.Executor:
            return inner.executor_creation_fn(
                dg.InitExecutorContext(
                    job=init_context.job,
                    executor_def=init_context.executor_def,
                    executor_config=executor_config,
                    instance=init_context.instance,
                )
            )

        chosen = with_forkserver_default(config)
        if chosen is config:  # in-process, or a start method the run config names: as configured
            return build(config)
        retries = config["multiprocess"].get("retries")
        in_process = build({"in_process": {"retries": retries} if retries is not None else {}})
        return LightRunsInProcess(build(chosen), in_process)

    return wrapped_executor(
        inner,
        create,
        "steps start from a preloaded forkserver unless the run config names a start method; a run of "
        "boards only runs in its own process (soco_pipeline/defs/shared/executors.py)",
    )
