"""The fields of ``vllm bench serve --save-result`` that are not statistics of the run: the setup
header, and with ``--save-detailed`` the per-request lists.

The field set followed is vLLM 0.32.0's, as its ``vllm bench serve --save-result --save-detailed``
wrote it in ``tests/data/vllm-cpu/run4_*.json`` (55 keys), with how each is set read from
``vllm/benchmarks/serve.py`` (in neuralmagic/vllm at commit 32f5573, a fork of vLLM's main):

- setup: ``date`` (``%Y%m%d-%H%M%S``), ``endpoint_type`` and ``backend`` (both ``--backend``),
  ``label`` (``--label``, default null), ``model_id`` (``--model``), ``tokenizer_id``
  (``--tokenizer``, default the model), ``num_prompts``, ``request_rate`` (a number, or the
  string ``"inf"``), ``burstiness``, ``max_concurrency`` (null when not given);
- results: ``duration``, ``completed``, ``failed``, ``total_input_tokens``,
  ``total_output_tokens``, ``request_throughput``, ``request_goodput`` (null without
  ``--goodput``), ``output_throughput``, ``total_token_throughput``, ``max_output_tokens_per_s``,
  ``max_concurrent_requests``, ``rtfx`` (audio's real-time factor: 0.0 for text);
- per metric (``ttft``, ``tpot``, ``itl``, ``e2el``): ``mean_*_ms``, ``median_*_ms``,
  ``std_*_ms`` and ``p{p}_*_ms`` per percentile, ``p99.9_itl_ms`` style for fractions. vLLM's
  ``percentiles_*_ms`` lists of (p, value) are attributes of its metrics object, never saved
  keys; they are not written here either;
- with ``--save-detailed``, per request in send order: ``input_lens``, ``output_lens``,
  ``ttfts``, ``itls`` (each request's list of gaps), ``latencies``, ``start_times``,
  ``queue_times``, ``generated_texts``, ``errors``, in seconds. That serve.py writes six of
  them and drops them without the flag; 0.32 also writes ``latencies``, ``start_times`` and
  ``queue_times``, per-request data of the same kind, so they too come only with the flag.

The statistics are results/summary.py's. What a simulation has no value for is set the way a vLLM
user would read it:

- ``backend`` and ``endpoint_type`` are ``"vllm"``: that field names the client's API protocol,
  and ``vllm`` is the one a vLLM user passes to benchmark a vLLM server (the simulated engine is
  named by ``preset``).
- ``label`` is the scheduler's label, the name that tells this result from the file's others.
- ``model_id`` is the model's name; there is no tokenizer, so ``tokenizer_id`` is the model's
  name too, as vLLM sets it when ``--tokenizer`` is not given.
- ``date`` is ``EPOCH_DATE`` unless the wall-clock date is asked for (``servesim run
  --date-now``): result files are byte-identical for the same scenario and seed, and a fixed
  date in vLLM's format still parses where readers expect one.
- A replayed trace has no configured rate: ``request_rate`` and ``burstiness`` are null.
- ``generated_texts`` are empty strings (no text is generated; vLLM's value for a request
  without text) and ``errors`` empty strings (a run ends only when every request has finished,
  so no request failed).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from simulator.results.summary import latency_arrays_s, percentile_key

DATE_FORMAT = "%Y%m%d-%H%M%S"
EPOCH_DATE = "19700101-000000"
BACKEND = "vllm"

SETUP_FIELDS = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
                "num_prompts", "request_rate", "burstiness", "max_concurrency")
RESULT_FIELDS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                 "request_throughput", "request_goodput", "output_throughput",
                 "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests",
                 "rtfx")
DETAILED_FIELDS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
                   "queue_times", "generated_texts", "errors")
METRICS = ("ttft", "tpot", "itl", "e2el")


def vllm_field_names(percentiles, detailed: bool = False) -> tuple[str, ...]:
    """Every key vLLM saves for these percentiles (``--percentile-metrics ttft,tpot,itl,e2el``)."""
    stats = tuple(f"{stat}_{m}_ms" for m in METRICS for stat in ("mean", "median", "std"))
    pcts = tuple(percentile_key(m, p) for m in METRICS for p in percentiles)
    return SETUP_FIELDS + RESULT_FIELDS + stats + pcts + (DETAILED_FIELDS if detailed else ())


@dataclass(frozen=True)
class BenchSetup:
    """What a run's summary says about its setup, in vLLM's terms."""
    label: str
    model_id: str
    request_rate: float | None     # math.inf: all at once; None: a replayed trace
    burstiness: float | None
    date: str = EPOCH_DATE

    def fields(self) -> dict:
        return {"date": self.date, "endpoint_type": BACKEND, "backend": BACKEND,
                "label": self.label, "model_id": self.model_id, "tokenizer_id": self.model_id,
                "request_rate": self.request_rate, "burstiness": self.burstiness, "rtfx": 0.0}


def now_date() -> str:
    """The wall-clock date as vLLM writes it (local time)."""
    return time.strftime(DATE_FORMAT)


def traffic_of(arrival) -> tuple[float | None, float | None]:
    """(request_rate, burstiness) as vLLM's flags would give this arrival process: Poisson is
    burstiness 1, evenly spaced arrivals are ``--burstiness inf``, ``inf`` sends all at once."""
    kind = arrival.kind
    if kind == "inf":
        return math.inf, 1.0
    if kind == "trace":
        return None, None
    burstiness = {"poisson": 1.0, "constant": math.inf}.get(kind, getattr(arrival, "burstiness", None))
    return float(arrival.rate), None if burstiness is None else float(burstiness)


def detailed_lists(requests) -> dict:
    """vLLM's ``--save-detailed`` lists from a RequestTable (results/request_table.py) whose
    gaps were kept, in request id order (the send order)."""
    arrays = requests.arrays()
    gaps = requests.gaps_of_finished()
    if gaps is None:
        raise ValueError("--save-detailed: needs each request's inter-token gaps; set "
                         "metrics.record_itl_gaps: true")
    arrival_s = arrays["arrival_s"]
    ttft_s, _, e2el_s = latency_arrays_s(arrival_s, arrays["first_token_s"], arrays["last_token_s"],
                                         arrays["num_output_tokens"])
    n = len(arrival_s)
    return {"input_lens": arrays["num_prompt_tokens"].tolist(),
            "output_lens": arrays["num_output_tokens"].tolist(),
            "ttfts": ttft_s.tolist(), "itls": [list(g or ()) for g in gaps],
            "latencies": e2el_s.tolist(),
            "start_times": arrival_s.tolist(),
            "queue_times": arrays["client_queue_s"].tolist(),
            "generated_texts": [""] * n, "errors": [""] * n}
