"""Store operations written once, run synchronously or asynchronously.

A public store method's logic (validation, the exact fallback's over-fetching, merging
results) is a *plan*: a generator that yields each backend hook call it needs as a
:class:`HookCall` and receives the hook's result back, without doing any I/O itself (the
"sans-I/O" shape of psycopg's generators). Two drivers run plans:

* :func:`run_plan` calls each hook directly: the synchronous API, and the async API of a
  store whose engine has no async client (the whole plan then runs on the store's
  :class:`~memcore.workers.WorkerPool`);
* :func:`arun_plan` awaits each hook's async variant (``_alist`` for ``_list``) on the event loop
  where the backend has one, and runs everything else on the workers.

Either way the same validation runs, the same errors are raised and the same results come
back, because there is only one copy of the logic.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Generator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeAlias, TypeVar

from memcore.errors import StoreClosedError
from memcore.workers import WorkerPool

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class HookCall:
    """One backend hook a plan needs called: ``hook(*args, **kwargs)``."""

    hook: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def async_name(self) -> str:
        """The name of the hook's async variant: ``_alist`` for ``_list``."""
        return "_a" + self.hook.__name__.removeprefix("_")


Plan: TypeAlias = Generator[HookCall, Any, R]
"""A store operation: yields hook calls, receives their results, returns the operation's result."""


def call(hook: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Generator[HookCall, Any, R]:
    """Inside a plan, ``result = yield from call(self._list, scope, query)``: typed like the hook."""
    result: R = yield HookCall(hook, args, kwargs)
    return result


def run_plan(plan: Plan[R]) -> R:
    """Run ``plan`` here and now, calling each hook synchronously."""
    with closing(plan):  # a failed or cancelled call leaves no suspended frame
        try:
            step = next(plan)
            while True:
                step = plan.send(step.hook(*step.args, **step.kwargs))
        except StopIteration as done:
            result: R = done.value
            return result


async def arun_plan(plan: Plan[R], native: object, workers: WorkerPool) -> R:
    """Run ``plan`` for the event loop: a hook with an async variant on ``native`` is awaited on
    the loop; everything else (validation, the logic between hooks, hooks without a variant) runs
    on ``workers``, so the loop only ever waits for I/O."""
    try:
        step, value = await workers.run(_advance, plan, native, None, True)
        while step is not None:
            variant: Callable[..., Awaitable[Any]] = getattr(native, step.async_name)
            result = await variant(*step.args, **step.kwargs)
            try:
                step, value = await workers.run(_advance, plan, native, result, False)
            except StoreClosedError:
                # The store closed while the hook ran (a write it made has landed): the rest of
                # the plan runs here, where a further hook meets the closed store.
                step, value = _advance(plan, native, result, False)
        outcome: R = value
        return outcome
    finally:
        # A cancelled call may leave a worker still running the plan: that worker ends it.
        with contextlib.suppress(ValueError):
            plan.close()


def _advance(plan: Plan[Any], native: object, value: Any, first: bool) -> tuple[HookCall | None, Any]:
    """On a worker: run ``plan`` until it needs a hook with an async variant (returned, to be
    awaited on the loop) or ends (``None`` and its result)."""
    try:
        step = next(plan) if first else plan.send(value)
        while getattr(native, step.async_name, None) is None:
            step = plan.send(step.hook(*step.args, **step.kwargs))
        return step, None
    except StopIteration as done:
        return None, done.value
