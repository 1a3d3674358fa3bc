"""The client's round trip: time in a bench run's TTFT and E2E that no engine step accounts for.

``vllm bench serve`` times TTFT and E2E from just before its POST to the first and last streamed
chunk (semantics §7): both hold the HTTP request, tokenisation and hand-over to the engine core on
the way in, and detokenisation and streaming on the way out. TPOT and the inter-token gaps do not
(every chunk pays the way out alike). The simulator starts a request when the engine gets it and
ends it at its step's end, so this constant is added to its TTFT and E2E.

Measured from the run itself: a request sent while no other request of the run was in flight found
the engine idle, so its TTFT is the round trip, one step's unlogged time (scheduling, output
processing: ``iteration_log.unlogged_step_time_s``) and its prefill step's logged time; when that
step held no other request, the rest is the round trip. Which step prefilled which request follows
from first-come-first-served admission (cumulative prompt tokens), checked against the log: every
step must decode exactly the requests that mapping puts in it, which a preempted (recomputed)
request breaks. On our closed-loop c1 run: 12.0 ms (32 requests, sd 3.2 ms) of a 296 ms TTFT.

An estimate needs ``MIN_IDLE_REQUESTS`` such requests: one request's TTFT carries its own jitter
(sd 3.2 ms on the c1 run, a quarter of the mean) and gives no spread to judge it by; five bring
the standard error of the mean under half the spread (1/sqrt(5) = 0.45: +-1.4 ms on c1's 12 ms).
Busier runs rarely have that many (c4: one, c16: none), and a round trip measured on a run of the
same server at concurrency 1 can be given with ``--client-overhead-ms`` instead.

In a closed loop the next request also reaches the engine one round trip after the previous one
finished, which delays its admission; the simulator does not model that wait (a fraction of a
decode step at these concurrencies).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.validate.measured import MeasuredRun


MIN_IDLE_REQUESTS = 5


@dataclass(frozen=True)
class RoundTrip:
    seconds: float
    num_requests: int     # requests it was measured on
    sd_s: float


def client_round_trip(run: MeasuredRun, unlogged_step_s: float) -> RoundTrip | None:
    """The mean round trip over the requests that found the engine idle, or None where the run has
    none (or its log does not line up with first-come-first-served prefills)."""
    prefill_step = prefill_steps(run)
    if prefill_step is None:
        return None
    steps = run.steps
    alone = (steps.ctx_reqs[prefill_step] == 1) & (steps.gen_reqs[prefill_step] == 0)
    chosen = alone & _found_engine_idle(run.arrival_s, run.arrival_s + run.e2el_s)
    if not chosen.any():
        return None
    rest_s = run.ttft_s[chosen] - steps.elapsed_s[prefill_step[chosen]] - unlogged_step_s
    return RoundTrip(float(rest_s.mean()), int(chosen.sum()), float(rest_s.std()))


def prefill_steps(run: MeasuredRun) -> np.ndarray | None:
    """Index of the step that completed each request's prompt (rows in arrival order), or None when
    the log's decode counts disagree with that mapping."""
    steps = run.steps
    if steps is None or not len(steps):
        return None
    done = np.searchsorted(np.cumsum(steps.ctx_tokens), np.cumsum(run.num_prompt_tokens))
    if (done >= len(steps)).any():
        return None
    # A request decodes in each step after its prefill until its last token: out - 1 steps.
    starts, stops = done + 1, done + np.maximum(run.num_output_tokens, 1)
    delta = np.zeros(len(steps) + 1, np.int64)
    np.add.at(delta, np.minimum(starts, len(steps)), 1)
    np.add.at(delta, np.minimum(stops, len(steps)), -1)
    decoding = np.cumsum(delta)[:-1]
    return done if np.array_equal(decoding, steps.gen_reqs) else None


def _found_engine_idle(start_s: np.ndarray, end_s: np.ndarray) -> np.ndarray:
    """True for a request sent while no other request was between its send and its last token."""
    order = np.argsort(start_s, kind="stable")
    latest_end = np.maximum.accumulate(end_s[order])
    idle_sorted = np.concatenate(([True], start_s[order][1:] >= latest_end[:-1]))
    idle = np.empty(len(start_s), bool)
    idle[order] = idle_sorted
    return idle
