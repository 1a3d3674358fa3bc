"""Whole scenarios drawn at random and run the way `servesim run` runs them (issue 22, point 5).

Each example is a scenario dict, the mapping a user's YAML file reads to, taken through
validate_scenario -> prepare -> simulate. The draws cover every registered preset (the alias
too), KV caches from one block short of the longest request's need to roomy, the priority policy
with equal priorities and equal arrival instants (``inf`` bursts, closed loops, constant rates on
the unit step's grid, traces with repeated ``arrival_s``), prefix caching on and off over shared
prompt prefixes (``vllm_random`` token ids, trace token ids), async scheduling, several replicas
under every router, prefill/decode pools (docs/disaggregation-semantics.md) for the presets that
pull KV, a hybrid model's pool of attention and state blocks under the V1 presets
(docs/hybrid-state-semantics.md), and a minority of runs with a few hundred requests. The cost
model is ``unit``, so a run costs its steps only.

Every run is refused up front with a ScenarioError exactly when some request cannot run alone
(its prompt past the policy's limit, or a pool smaller than the smallest its policy's start-up
checks and ``blocks_to_finish`` accept); otherwise every request finishes with the output count
of rule 1.3.2, times in order, the summary's totals equal the requests', the step log keeps the
seat and token limits and the executed tokens add up, and a subset reproduces exactly from the
seed.

A failing example prints its scenario as YAML (and a trace file's rows, if it has one, under the
path the scenario names): save it and `servesim run FILE` replays the run. README.md, under the
test commands, says how to replay an example in the test.
"""
from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
import yaml
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from simulator.engine.progress import NoProgressError
from simulator.engine.routing import router_names
from simulator.core.request import Request
from simulator.policies.registry import get_preset, preset_names
from simulator.runner import counted_kv_cache, prepare, simulate
from simulator.scenario import ScenarioError, validate_scenario
from simulator.scenario.file import parse_yaml
from tests.test_properties import ROOMY_BLOCKS, expected_outputs, smallest_pool
from tests.test_properties_refusal import _outcome

# 8 presets x 100 = 800 examples per run; with 15 x 60 in tests/test_properties.py and 50 in
# tests/test_properties_refusal.py, 1,750 per CI run, from a fresh seed each run (conftest.py).
SCENARIOS = settings(max_examples=100)
BUDGETED = {"vllm_v0", "sarathi", "vllm_v1", "vllm_v1_spf"}   # a per-step token budget
V1 = {"vllm_v1", "vllm_v1_spf"}


def _family(preset: str) -> str:
    return get_preset(preset).name   # an alias's preset (faster_transformer: static)


@st.composite
def scheduler_entries(draw, preset: str, max_model_len: int, large: bool) -> dict:
    family = _family(preset)
    entry = {"preset": preset, "max_num_seqs": draw(st.integers(4 if large else 1, 16))}
    if family == "static":
        entry["variant"] = draw(st.sampled_from(["ft", "hf"]))
        entry["max_wait_s"] = draw(st.sampled_from([0.0, 0.0, 0.5, 3.0]))
    elif family == "orca":
        entry["reserve"] = draw(st.sampled_from(["max_model_len", "request"]))
    elif family == "sglang":   # docs/sglang-semantics.md
        entry["chunked_prefill_size"] = draw(st.sampled_from([-1, 16, 64, 8192]))
        entry["enable_mixed_chunk"] = draw(st.booleans())
        entry["schedule_policy"] = draw(st.sampled_from(["fcfs", "lpm", "dfs-weight"]))
        entry["disable_radix_cache"] = draw(st.booleans())
        entry["new_token_ratio_decay_steps"] = draw(st.sampled_from([1, 600]))
    if family not in BUDGETED:
        return entry
    chunking = family == "sarathi"
    if family != "sarathi":
        chunking = draw(st.booleans() if family == "vllm_v0"
                        else st.sampled_from([True, True, False]))
        entry["enable_chunked_prefill"] = chunking
    if family in V1:
        entry["scheduling_policy"] = draw(st.sampled_from(["fcfs", "priority"]))
        entry["enable_prefix_caching"] = draw(st.booleans())
        entry["async_scheduling"] = draw(st.booleans())
        entry["long_prefill_token_threshold"] = draw(st.sampled_from([0, 0, 3, 17]))
        entry["reserve_full_isl"] = draw(st.sampled_from([True, True, False]))
        entry["watermark"] = draw(st.sampled_from([0.0, 0.0, 0.05]))
    # [CFG] startup checks (rule 1.2): budget >= max_num_seqs, and >= max_model_len unchunked.
    low = max(entry["max_num_seqs"], max_model_len if not chunking else 1)
    entry["max_num_batched_tokens"] = draw(st.integers(low, low + 64))
    return entry


@st.composite
def synthetic_lengths(draw, top_prompt: int, top_output: int) -> dict:
    kind = draw(st.sampled_from(["uniform", "fixed", "lognormal", "vllm_random", "vllm_random"]))
    if kind == "fixed":   # every request alike: ties in every waiting order
        return {"prompt_len": {"kind": "fixed", "value": draw(st.integers(1, top_prompt))},
                "output_len": {"kind": "fixed", "value": draw(st.integers(1, top_output))}}
    if kind in ("uniform", "lognormal"):
        out = {}
        for name, top in (("prompt_len", top_prompt), ("output_len", top_output)):
            low = draw(st.integers(1, top))
            out[name] = ({"kind": "uniform", "low": low, "high": draw(st.integers(low, top))}
                         if kind == "uniform" else
                         {"kind": "lognormal", "median": float(low),
                          "sigma": draw(st.sampled_from([0.0, 0.5, 1.5])), "max": top})
        return out
    # vLLM's random dataset; with vocab_size every prompt has token ids and prefix_len shared ones.
    prefix = draw(st.integers(0, top_prompt // 2))
    ratio = draw(st.sampled_from([0.0, 0.25]))
    room = top_prompt - prefix
    input_len = draw(st.integers(2 if ratio else 1, max(2, math.floor(room / (1 + ratio)))))
    lengths = {"kind": "vllm_random", "input_len": input_len,
               "output_len": draw(st.integers(2, max(2, top_output))), "range_ratio": ratio,
               "prefix_len": prefix}
    vocab = draw(st.sampled_from([None, 4, 64, 32000]))
    if vocab is not None:
        lengths["vocab_size"] = vocab
    return {"lengths": lengths}


def trace_rows(seed: int, n: int, top_prompt: int, top_output: int, grid_s: float) -> list[dict]:
    """``n`` trace rows: arrivals on a grid (many equal instants), priorities 0/1, and prompts
    that start with one of a few shared prefixes of token ids."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.integers(0, n // 3 + 1, size=n)) * grid_s
    prefixes = [rng.integers(0, 50, size=rng.integers(0, top_prompt // 2 + 1)).tolist()
                for _ in range(int(rng.integers(1, 4)))]
    rows = []
    for a in arrival.tolist():
        ids = prefixes[int(rng.integers(len(prefixes)))]
        tail = int(rng.integers(1, top_prompt - len(ids) + 1))
        ids = ids + rng.integers(0, 50, size=tail).tolist()
        rows.append({"arrival_s": a, "input_toks": len(ids),
                     "output_toks": int(rng.integers(1, top_output + 1)), "input_tok_ids": ids,
                     "priority": int(rng.integers(0, 2))})
    return rows


@st.composite
def workloads(draw, trace_dir, n: int, max_model_len: int, large: bool) -> tuple[dict, str]:
    """The ``workload:`` block, and the text of its trace file ("" without one)."""
    top_prompt = min(max_model_len - 1, 128 if large else max_model_len - 1)
    top_output = 32 if large else max_model_len
    kind = draw(st.sampled_from(["inf", "poisson", "gamma", "constant", "trace", "trace"]))
    workload: dict = {}
    text = ""
    if kind == "trace":
        rows = trace_rows(draw(st.integers(0, 2**32 - 1)), n, top_prompt, top_output,
                          draw(st.sampled_from([1.0, 0.5, 0.25])))
        text = "".join(json.dumps(row) + "\n" for row in rows)
        path = trace_dir / f"trace-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
        if not path.exists():
            path.write_text(text)
        workload["arrival"] = {"kind": "trace", "path": str(path)}
        if draw(st.booleans()):
            workload["num_requests"] = draw(st.integers(1, n))
    else:
        arrival = {"kind": kind}
        if kind != "inf":
            arrival["rate"] = draw(st.sampled_from([1.0, 2.0, 0.5, 4.0, 100.0]))
        if kind in ("poisson", "constant"):
            arrival["timing"] = draw(st.sampled_from(["newer", "older"]))
        if kind == "gamma":
            arrival["burstiness"] = draw(st.sampled_from([0.1, 0.5, 3.0]))
        workload.update(arrival=arrival, num_requests=n,
                        **draw(synthetic_lengths(top_prompt, top_output)))
    concurrency = draw(st.sampled_from([None, None, None, 1, 2, 5]))
    if concurrency is not None:   # a closed loop: arrivals wait for a finish, ties with step ends
        workload["max_concurrency"] = concurrency
    priority = draw(st.sampled_from([None, None, [0, 1], [0], [2, 0, 1]]))
    if priority is not None:
        workload["priority"] = {"kind": "choice", "values": priority}
    return workload, text


@st.composite
def scenarios(draw, preset: str, trace_dir) -> tuple[dict, str]:
    """A scenario dict whose ``engine.num_gpu_blocks`` is a placeholder ``sized`` replaces."""
    large = draw(st.sampled_from([False] * 7 + [True]))     # one run in eight: 100-300 requests
    n = draw(st.integers(100, 300) if large else st.integers(1, 30))
    max_model_len = draw(st.integers(8, 128 if large else 300))
    workload, text = draw(workloads(trace_dir, n, max_model_len, large))
    engine = {"block_size": draw(st.sampled_from([1, 2, 4, 16])), "num_gpu_blocks": ROOMY_BLOCKS,
              "max_model_len": max_model_len}
    replicas = draw(st.sampled_from([1, 1, 1, 2, 3]))
    if replicas > 1:
        engine.update(num_replicas=replicas,
                      router=draw(st.sampled_from(router_names())))
    cost = {"kind": "unit", "fixed_step_time_s": draw(st.sampled_from([1.0, 0.5, 0.01]))}
    prefill = draw(st.sampled_from([None, None, 2.0, 0.25]))
    if prefill is not None:
        cost["prefill_step_time_s"] = prefill
    entry = draw(scheduler_entries(preset, max_model_len, large))
    # A hybrid model (rule H4: each request also holds 3 state blocks) where V1 runs it.
    model = draw(st.sampled_from(["llama-2-7b"] * 3 + ["qwen3-next-80b-a3b"])) if preset in V1 \
        else "llama-2-7b"
    raw = {"name": "prop", "seed": draw(st.integers(0, 2**32 - 1)), "model": model,
           "hardware": "a100-80gb", "cost_model": cost, "engine": engine, "workload": workload,
           "schedulers": [entry]}
    # Speculative decoding (docs/speculative-decoding-semantics.md) where it is modelled: V1
    # without async scheduling (rule S9), gaps kept (rule S8).
    if (_family(preset) in V1 and not entry["async_scheduling"] and model == "llama-2-7b"
            and draw(st.booleans())):
        k = draw(st.integers(1, 4))
        engine["speculative"] = {"method": draw(st.sampled_from(["ngram", "eagle", "mtp"])),
                                 "num_speculative_tokens": k,
                                 "mean_acceptance_length": draw(st.sampled_from([1.0, 1.5, 1.0 + k]))}
    elif draw(st.sampled_from([True, True, True, False])) is False:
        raw["metrics"] = {"record_itl_gaps": False}
    if ("speculative" not in engine and model != "qwen3-next-80b-a3b"
            and get_preset(preset).cls.supports_remote_kv
            and draw(st.sampled_from([False] * 3 + [True]))):
        raw["disaggregation"] = draw(pools(replicas))
        raw["engine"] = {k: v for k, v in engine.items() if k not in ("num_gpu_blocks", "num_replicas")}
    # Pipeline stages where they are modelled (docs/pipeline-parallel-semantics.md): a batch in
    # flight per stage, so decodes, chunks and arrivals interleave across in-flight batches.
    elif ("speculative" not in engine and model == "llama-2-7b" and not entry.get("async_scheduling")
          and get_preset(preset).cls.supports_pipeline_parallel):
        engine["pipeline_parallel_size"] = draw(st.sampled_from([1, 1, 2, 3]))
    return raw, text


@st.composite
def pools(draw, replicas: int) -> dict:
    """A prefill pool of roomy blocks and a decode pool whose blocks ``sized`` sets; pulls from
    much slower than a step to instant."""
    return {"prefill": {"num_replicas": draw(st.integers(1, 2)), "num_gpu_blocks": ROOMY_BLOCKS},
            "decode": {"num_replicas": replicas, "num_gpu_blocks": ROOMY_BLOCKS},
            "kv_transfer": {"bandwidth_GBps": draw(st.sampled_from([0.05, 1.0, 1000.0])),
                            "latency_us": draw(st.sampled_from([0.0, 1000.0]))}}


def show(raw: dict, trace_text: str) -> None:
    """The example as files a user can save: the scenario (exactly the dict validated) and its
    trace, whose path the scenario names."""
    text = yaml.safe_dump(raw, sort_keys=False)
    assert parse_yaml(text, "the shown YAML") == raw   # the YAML reads back to this very dict
    note(f"scenario.yaml (servesim run scenario.yaml):\n{text}")
    if trace_text:
        note(f"{raw['workload']['arrival']['path']}:\n{trace_text}")


def sized(raw: dict, slack: int) -> tuple[dict, bool]:
    """``raw`` with ``slack`` usable blocks more than the smallest pool its policy accepts for
    its requests (so -1 is one block short), and whether the run must be refused up front."""
    try:
        roomy = prepare(validate_scenario(raw))
    except ScenarioError:
        return raw, True   # refused at any size: a prompt past the policy's limit
    run, trace = roomy.runs[0], roomy.trace
    requests = [Request(i, 0.0, int(p), int(o))
                for i, (p, o) in enumerate(zip(trace.num_prompt_tokens, trace.max_output_tokens))]
    def make(blocks: int):   # a hybrid model's pool: its layout's block size and state blocks
        return run.scheduler_cls(run.options, counted_kv_cache(blocks, run.context.block_size,
                                                               run.layout), run.context)
    smallest = smallest_pool(make, requests)
    total = max(1, smallest + slack)
    if "disaggregation" in raw:   # the decode pool holds whole requests: sized as one engine
        pd = raw["disaggregation"]
        return (dict(raw, disaggregation=dict(pd, decode=dict(pd["decode"], num_gpu_blocks=total + 1))),
                total < smallest)
    return dict(raw, engine=dict(raw["engine"], num_gpu_blocks=total + 1)), total < smallest


def check_run(raw: dict, prepared, out) -> None:
    trace, options, mml = prepared.trace, prepared.runs[0].options, raw["engine"]["max_model_len"]
    rows, summary, steps = out.requests.rows(), out.summary, out.steps.to_columns()
    n = len(trace)
    assert [r.request_id for r in rows] == list(range(n))                 # every request, once
    assert summary["completed"] == n and summary["failed"] == summary["num_unfinished"] == 0
    outputs = [expected_outputs(int(p), int(o), mml)                        # rule 1.3.2
               for p, o in zip(trace.num_prompt_tokens, trace.max_output_tokens)]
    assert [r.num_output_tokens for r in rows] == outputs
    assert [r.num_prompt_tokens for r in rows] == trace.num_prompt_tokens.tolist()
    assert summary["total_input_tokens"] == int(trace.num_prompt_tokens.sum())
    assert summary["total_output_tokens"] == sum(outputs)
    hf = _family(options.preset) == "static" and options.variant == "hf"
    for r, arrival in zip(rows, trace.arrival_s.tolist()):
        if trace.max_concurrency is None:   # sent when released, at exactly the drawn time
            assert r.client_queue_s == 0.0 and r.arrival_s == arrival
        else:                               # or when a closed-loop slot frees
            assert r.client_queue_s >= 0 and math.isclose(r.arrival_s, arrival + r.client_queue_s)
        assert r.arrival_s <= r.scheduled_s < r.first_token_s <= r.last_token_s == r.finish_s
        if hf:
            assert r.first_token_s == r.last_token_s                       # one chunk (trap 18)
        # Hits are capped at num_tokens - 1 at admission (rule 2.4); a re-admission after a
        # preemption counts generated tokens too.
        assert 0 <= r.num_cached_tokens < (r.num_prompt_tokens if not r.num_preemptions else
                                           r.num_prompt_tokens + r.num_output_tokens)
    preemptions = sum(r.num_preemptions for r in rows)
    assert summary["num_preemptions"] == preemptions >= int(steps["num_preemptions"].sum())
    seats = getattr(options, "max_batch_size", None) or options.max_num_seqs
    assert np.all(steps["end_s"] > steps["start_s"]) and steps["num_running"].max() <= seats
    assert np.all((steps["kv_usage"] >= 0) & (steps["kv_usage"] <= 1))
    disaggregated = "disaggregation" in raw
    if raw["engine"].get("num_replicas", 1) == 1 and not disaggregated:
        if raw["engine"].get("pipeline_parallel_size", 1) == 1:
            assert np.all(steps["start_s"][1:] >= steps["end_s"][:-1])   # one step at a time
        else:   # steps overlap across stages, and pass each stage in order (rule P4)
            assert np.all(np.diff(steps["start_s"]) >= 0) and np.all(np.diff(steps["end_s"]) >= 0)
    if disaggregated:   # every request pulled once (rule D2), every block freed (D3)
        assert summary["num_kv_transfers"] == n
        assert all(r.scheduler.kv.num_free_blocks == r.scheduler.kv.num_total_blocks
                   for r in out.result.replicas)
    if _family(options.preset) in BUDGETED:
        assert steps["num_tokens"].max() <= options.max_num_batched_tokens
    # Both count each request's first admission only, as vLLM's metrics do (P/D: the summary
    # adds the prefill pool's hits, which the decode side's rows do not see).
    if not disaggregated:
        assert summary["prefix_cache_hits"] == sum(r.num_cached_tokens for r in rows)
    # Executed tokens: each request's P + O - 1 (the last token gets no KV, rule 2.2) less its
    # prefix-cache hits, plus what preemptions threw away (rule 2.5) and hf's padding rows. A
    # resumed request's hits are in no count, so with prefix caching a preemption bounds nothing.
    # P/D: the decode side computes each prompt's last token once more (rule D4).
    needed = sum(r.num_prompt_tokens + r.num_output_tokens - 1 - r.num_cached_tokens for r in rows)
    executed = int(steps["num_tokens"].sum())
    speculative = raw["engine"].get("speculative") is not None
    if speculative:   # rejected drafts are executed too (rule S3)
        event("speculative")
        if not (preemptions and getattr(options, "enable_prefix_caching", False)):
            assert executed >= needed
        assert summary["spec_decode_num_accepted_tokens"] <= summary["spec_decode_num_draft_tokens"]
    elif disaggregated:
        if not (preemptions or getattr(options, "enable_prefix_caching", False)):
            assert executed == needed + n
    elif not (preemptions or hf):
        assert executed == needed
    elif not getattr(options, "enable_prefix_caching", False):
        assert executed >= needed
    event("preempted" if preemptions else "no preemption")
    event("prefix cache hits" if summary["prefix_cache_hits"] else "no prefix cache hit")


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("traces")


@pytest.mark.parametrize("preset", preset_names())
@SCENARIOS
@given(data=st.data())
def test_drawn_scenarios_are_refused_up_front_or_finish_every_request(preset, trace_dir, data):
    raw, trace_text = data.draw(scenarios(preset, trace_dir), label="scenario")
    slack = data.draw(st.sampled_from([-1, 0, 0, 1, 2, 8, 1000]), label="KV slack")
    raw, refuse = sized(raw, slack)
    show(raw, trace_text)
    event(f"arrival {raw['workload']['arrival']['kind']}")
    event(f"{raw['engine'].get('num_replicas', 1)} replica(s)")
    event("disaggregated" if "disaggregation" in raw else "co-located")
    event("hybrid model" if raw["model"] == "qwen3-next-80b-a3b" else "attention only")
    if refuse:
        event("refused")
        with pytest.raises(ScenarioError):
            prepare(validate_scenario(raw))
        return
    prepared = prepare(validate_scenario(raw))
    try:
        out = simulate(prepared, prepared.runs[0])
    except NoProgressError as exc:
        # P/D only: pulled requests hold blocks behind a head that needs them (rule D2), a
        # deadlock vLLM shares; the run must stop saying so. Co-located runs always finish.
        assert "disaggregation" in raw and "hold-and-wait" in str(exc), str(exc)
        event("P/D hold-and-wait stop")
        return
    check_run(raw, prepared, out)
    event("large" if len(prepared.trace) >= 100 else "small")
    repro = data.draw(st.sampled_from([False, False, True]), label="reproduce")
    if repro and len(prepared.trace) <= 40:
        first = _outcome(raw)
        assert _outcome(raw) == first                          # same dict and seed, same bytes
        assert _outcome(raw, fast_path=False) == first         # the fast path changes nothing

