"""Progress: stop a run that can make none, with a diagnosis, instead of spinning; and the
progress bar long commands show on a terminal."""
from __future__ import annotations

import sys
import time
from typing import Callable


class NoProgressError(RuntimeError):
    """The run cannot finish: the message says which request is stuck and why."""


def diagnose_stall(scheduler, now_s: float) -> str:
    kv = scheduler.kv
    head = scheduler.waiting.peek() if scheduler.waiting else None
    where = f"at t={now_s:.6g}s: {scheduler.num_running} running, {len(scheduler.waiting)} waiting"
    if head is None:
        return f"no progress {where}: the scheduler returned an empty batch"
    need = kv.blocks_for(min(head.num_tokens, scheduler.max_model_len))
    headroom = scheduler.admission_headroom_blocks()
    watermark = f" plus a watermark of {headroom} kept free" if headroom else ""
    return (f"no progress {where}: request {head.request_id} ({head.num_tokens} tokens) needs "
            f"{need} KV blocks{watermark}; {kv.num_free_blocks} of {kv.num_total_blocks} are free"
            f"{_held_by_pulls(scheduler)} and max_num_seqs={scheduler.options.max_num_seqs}; raise "
            f"num_gpu_blocks / gpu_memory_utilization or shorten requests")


def _held_by_pulls(scheduler) -> str:
    """P/D: blocks that pulled requests hold while they wait (rule D2); vLLM waits for the head
    (or, preempting, recomputes the running ones) as well, so such a pool deadlocks or livelocks."""
    held = [r for r in scheduler.waiting if scheduler.kv.num_blocks_of(r)]
    if not held:
        return ""
    blocks = sum(scheduler.kv.num_blocks_of(r) for r in held)
    return (f", {blocks} blocks held by {len(held)} waiting request(s) whose KV was pulled "
            f"from the prefill pool (hold-and-wait: docs/disaggregation-semantics.md, rule D2)")


class ProgressWatchdog:
    """Without preemption every step advances some request, so a run always ends. A run stuck
    preempting and recomputing without keeping a token is a livelock: stop it. A token sampled
    and then discarded (async scheduling: its request was preempted while the step ran) is no
    progress."""

    MAX_STEPS_WITHOUT_TOKEN = 20_000
    MIN_PREEMPTIONS = 100

    def __init__(self):
        self.steps_without_token = 0
        self.preemptions = 0

    def observe(self, num_kept: int, num_preempted: int, scheduler) -> None:
        """A step kept ``num_kept`` sampled tokens and preempted ``num_preempted`` requests. A
        step that keeps one while steps_without_token is 0 changes nothing (preemptions is 0
        too): the engine skips the call then."""
        if num_kept:
            self.steps_without_token = 0
            self.preemptions = 0
            return
        self.steps_without_token += 1
        self.preemptions += num_preempted
        if (self.steps_without_token > self.MAX_STEPS_WITHOUT_TOKEN
                and self.preemptions >= self.MIN_PREEMPTIONS):
            raise NoProgressError(
                f"livelock: {self.steps_without_token} steps without a kept token and "
                f"{self.preemptions} preemptions ({scheduler.num_running} running, "
                f"{len(scheduler.waiting)} waiting, KV usage {scheduler.kv.usage:.2f}"
                f"{_held_by_pulls(scheduler)})")


# -- the progress bar of long commands -------------------------------------------------------------
PROGRESS_DELAY_S = 2.5     # a command that ends sooner never shows a bar
PROGRESS_REFRESH_S = 0.25  # the bar is redrawn at most four times a second
CHECKS_PER_RUN = 1_000     # the clock is read about this many times over the whole count


def stderr_is_terminal() -> bool:
    """True only for an interactive stderr: pipes, files, CI logs and pytest's capture say no."""
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):   # a replaced or closed stream
        return False


def progress_bar(total: int, desc: str, unit: str = "req", enabled: bool = True) -> "ProgressBar":
    """The one progress bar of every command (run, sweep, compare, timeline): tqdm on stderr,
    shown once the work has taken ``PROGRESS_DELAY_S``, and only where stderr is a terminal.
    Elsewhere the bar is inactive and costs nothing (tqdm is not even imported)."""
    if not (enabled and stderr_is_terminal()):
        return ProgressBar(None, total)
    from tqdm import tqdm
    return ProgressBar(tqdm(total=total, desc=desc, unit=unit, file=sys.stderr,
                            delay=PROGRESS_DELAY_S, mininterval=PROGRESS_REFRESH_S), total)


class ProgressBar:
    """Counts work done and passes it to tqdm on a coarse cadence: the clock is read every
    ``total / CHECKS_PER_RUN`` items and the bar redrawn at most every ``PROGRESS_REFRESH_S``. It
    only reads what it is told, so a run's results are the same with it or without it."""

    def __init__(self, bar, total: int):
        self._bar = bar
        self._stride = max(1, total // CHECKS_PER_RUN)
        self._pending = 0
        self._next_draw_s = 0.0

    @property
    def active(self) -> bool:
        return self._bar is not None

    def advance(self, n: int = 1) -> None:
        if self._bar is None:
            return
        self._pending += n
        if self._pending >= self._stride and time.monotonic() >= self._next_draw_s:
            self._bar.update(self._pending)
            self._pending = 0
            self._next_draw_s = time.monotonic() + PROGRESS_REFRESH_S

    def wrap(self, on_finished: Callable[[list], None]) -> Callable[[list], None]:
        """``on_finished`` (a list of finished requests) that also counts them; itself when inactive."""
        if self._bar is None:
            return on_finished

        def counted(finished: list) -> None:
            on_finished(finished)
            self.advance(len(finished))
        return counted

    def close(self) -> None:
        if self._bar is not None:
            self._bar.update(self._pending)
            self._pending = 0
            self._bar.close()

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
