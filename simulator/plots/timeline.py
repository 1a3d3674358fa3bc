"""The batch timeline: which request holds which batch slot at every step, and what it computes.

The classic picture of continuous batching: lanes are the engine's slots (``max_num_seqs``), time
runs left to right, and each step paints every slot by what its request did: prompt tokens
(prefill, also the recompute after a preemption), one decode token, or nothing while it still
holds the slot and its KV (stalled: e.g. vLLM V0 pausing decodes for a prefill step). A free slot
is left blank (idle) and a preemption is an x where the request lost its slot. Static batching
shows idle slots after short requests finish, because nothing may join until the batch drains.

Recording needs per-step batch membership, which runs do not keep (it costs memory), so
``record_timeline`` simulates again with ``Simulation(..., on_step=recorder)``.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from simulator.engine.routing import router_for
from simulator.engine.simulation import Simulation
from simulator.results.atomic import atomic_write
from simulator.results.step_table import StepTable
from simulator.core.request import RequestStatus
from simulator.runner import make_requests, replica_stages

TIMELINE_CSV = "timeline.csv"
COLUMNS = ("lane", "start_s", "end_s", "request_id", "kind")
COLORS = {"prefill": "tab:orange", "decode": "tab:blue", "stalled": "khaki"}


@dataclass
class SlotTimeline:
    label: str
    rows: list[tuple[int, float, float, int, str]] = field(default_factory=list)  # COLUMNS

    @property
    def num_lanes(self) -> int:
        return 1 + max((r[0] for r in self.rows), default=-1)

    @property
    def end_s(self) -> float:
        return max((r[2] for r in self.rows), default=0.0)


class _TimedStepLog(StepTable):
    """The step log, remembering the last step's times for the recorder (called right after)."""
    last_start_s = last_end_s = 0.0

    def append(self, start_s, end_s, *rest) -> None:
        self.last_start_s, self.last_end_s = start_s, end_s
        super().append(start_s, end_s, *rest)


class TimelineRecorder:
    """``on_step`` callback: assigns each admitted request the lowest free slot of its replica."""

    def __init__(self, label: str, lanes_per_replica: int):
        self.timeline = SlotTimeline(label)
        self.step_log = _TimedStepLog()
        self.lanes_per_replica = lanes_per_replica
        self.slots: dict[int, dict] = {}   # replica index -> {request: slot}

    def __call__(self, replica, batch, shape) -> None:
        start_s, end_s = self.step_log.last_start_s, self.step_log.last_end_s
        slots = self.slots.setdefault(replica.index, {})
        offset = replica.index * self.lanes_per_replica
        rows = self.timeline.rows
        in_batch = set(map(id, batch.requests))
        for request in [r for r in slots if id(r) not in in_batch]:
            if request.status is RequestStatus.RUNNING:
                rows.append((offset + slots[request], start_s, end_s, request.request_id, "stalled"))
            else:   # preempted while this batch was formed: it lost its slot at the step's start
                rows.append((offset + slots.pop(request), start_s, start_s, request.request_id,
                             "preempted"))
        for request, new, context in zip(batch.requests, batch.new_tokens, batch.context_tokens):
            slot = slots.get(request)
            if slot is None:
                slot = slots[request] = min(set(range(len(slots) + 1)) - set(slots.values()))
            kind = "decode" if new == 1 and context >= request.num_prompt_tokens else "prefill"
            rows.append((offset + slot, start_s, end_s, request.request_id, kind))
        for request in batch.requests:   # after all joined: a slot frees at the step's end
            if request.status is RequestStatus.FINISHED:
                del slots[request]


def record_timeline(prepared, run) -> SlotTimeline:
    """Simulate one scheduler of a prepared scenario again, recording every step's slots."""
    scenario = prepared.scenario
    engine = scenario.engine
    schedulers = [run.scheduler_cls(run.options, run.counted_kv_cache(), run.context)
                  for _ in range(engine.num_replicas)]
    recorder = TimelineRecorder(run.label, run.options.max_num_seqs)
    Simulation(make_requests(prepared.trace), schedulers, prepared.cost_model, recorder.step_log,
               max_concurrency=prepared.trace.max_concurrency, router=router_for(engine),
               on_step=recorder, sessions=prepared.trace.sessions,
               stages=replica_stages(prepared, [prepared.cost_model] * len(schedulers))).run()
    return _compact_lanes(recorder.timeline, run.options.max_num_seqs)


def _compact_lanes(timeline: SlotTimeline, lanes_per_replica: int) -> SlotTimeline:
    """Replicas' lanes stacked without the slots no request ever used."""
    used = timeline.num_lanes and 1 + max(r[0] % lanes_per_replica for r in timeline.rows)
    rows = [(lane // lanes_per_replica * used + lane % lanes_per_replica, *rest)
            for lane, *rest in timeline.rows]
    return SlotTimeline(timeline.label, rows)


def write_timeline_csv(timeline: SlotTimeline, path: Path) -> Path:
    def write(f) -> None:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows((lane, repr(s), repr(e), rid, kind) for lane, s, e, rid, kind in timeline.rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, write)
    return path


def read_timeline_csv(label: str, path: Path) -> SlotTimeline:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        next(reader)
        rows = [(int(lane), float(s), float(e), int(rid), kind) for lane, s, e, rid, kind in reader]
    return SlotTimeline(label, rows)
