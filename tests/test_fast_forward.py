"""Advancing identical decode steps in one event gives exactly the step-by-step results
(design §3: "provided results equal the step-by-step run exactly (a test proves it)")."""
import math
import warnings

import numpy as np
import pytest

from simulator.output import request_rows, summary_json
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario

PRESETS = [
    {"preset": "vllm_v1"},
    {"preset": "vllm_v1", "enable_chunked_prefill": False},
    {"preset": "vllm_v1", "scheduling_policy": "priority", "long_prefill_token_threshold": 24},
    {"preset": "vllm_v1", "reserve_full_isl": False},
    {"preset": "vllm_v0"},
    {"preset": "vllm_v0", "enable_chunked_prefill": True},
    {"preset": "sarathi"},
    {"preset": "orca"},
    {"preset": "orca", "reserve": "request"},
    {"preset": "static"},
    {"preset": "static", "variant": "hf"},
]


def random_scenario(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    sched = dict(PRESETS[seed % len(PRESETS)])
    max_model_len = int(rng.choice([128, 256, 512]))
    seats = int(rng.integers(1, 9))
    sched["max_num_seqs"] = seats
    if sched["preset"] in ("vllm_v1", "vllm_v0", "sarathi"):
        budget = int(rng.integers(seats, 300))
        if not sched.get("enable_chunked_prefill", sched["preset"] != "vllm_v0"):
            budget = max(budget, max_model_len)
        sched["max_num_batched_tokens"] = max(budget, seats)
    reserve_blocks = -(-max_model_len // 16)
    arrival = [{"kind": "poisson", "rate": float(rng.uniform(0.5, 20))},
               {"kind": "inf"},
               {"kind": "gamma", "rate": float(rng.uniform(1, 10)), "burstiness": 0.3}][seed % 3]
    workload = {"arrival": arrival,
                "prompt_len": {"kind": "uniform", "low": 1, "high": max_model_len // 2},
                "output_len": {"kind": "uniform", "low": 1, "high": max_model_len // 2 - 1},
                "num_requests": int(rng.integers(5, 40))}
    if seed % 5 == 0:
        workload["max_concurrency"] = int(rng.integers(1, 6))
    if sched.get("scheduling_policy") == "priority":
        workload["priority"] = {"values": [0, 1, 2]}
    return {"name": f"ff-{seed}", "seed": seed, "model": "llama-2-7b", "hardware": "a100-80gb",
            "cost_model": {"kind": "roofline"} if seed % 2 else {"kind": "unit", "fixed_step_time_s": 0.01},
            "engine": {"num_gpu_blocks": int(rng.integers(reserve_blocks + 1, 6 * reserve_blocks)),
                       "max_model_len": max_model_len},
            "workload": workload, "schedulers": [sched]}


def fingerprint(out) -> tuple:
    cols = out.result.step_log.to_columns()
    return (list(request_rows(out.result.requests)), {k: v.tolist() for k, v in cols.items()},
            summary_json(out.summary))


def stepwise_and_fast(scenario: dict):
    prepared = prepare(validate_scenario(scenario))
    run = prepared.runs[0]
    return simulate(prepared, run, fast_forward=False), simulate(prepared, run, fast_forward=True)


def assert_fast_equals_stepwise(scenario: dict) -> None:
    stepwise, fast = stepwise_and_fast(scenario)
    assert fingerprint(fast) == fingerprint(stepwise)


def with_scheduler(scenario: dict, **scheduler) -> dict:
    """The scenario with its one scheduler replaced (same workload, engine and seed)."""
    return {**scenario, "schedulers": [scheduler]}


@pytest.mark.parametrize("seed", range(66))
def test_fast_forward_equals_step_by_step(seed):
    assert_fast_equals_stepwise(random_scenario(seed))


@pytest.mark.parametrize("seed", range(0, 66, 3))
def test_fast_forward_equals_step_by_step_without_kept_gaps(seed):
    # Without per-token gaps the ITL figures come from per-request summaries; the sum of squared
    # gaps is grouped per run by the fast path (fast_forward.apply_decode_run) or taken as a
    # difference of running sums (decode_cohort.materialise); the rest is exact.
    scenario = random_scenario(seed)
    scenario["metrics"] = {"record_itl_gaps": False}
    stepwise, fast = stepwise_and_fast(scenario)
    std_slow, std_fast = stepwise.summary.pop("std_itl_ms"), fast.summary.pop("std_itl_ms")
    # With equal gaps the true std is 0 and E[x²] - E[x]² leaves rounding noise of order
    # sqrt(eps x sum of squares), about 1e-6 ms here on either path: compare to 10 ns.
    assert std_fast == pytest.approx(std_slow, rel=1e-9, abs=1e-5)
    assert fingerprint(fast) == fingerprint(stepwise)
    assert fast.summary["mean_itl_ms"] is not None and fast.summary["median_itl_ms"] is None


def prefix_cache_scenario(seed: int) -> dict:
    """vLLM V1 with prefix caching on prompts that share a prefix, a KV cache small enough to
    evict and preempt: block identities (which cached block a new block evicts) must follow the
    single steps exactly, through the finishes a run carries."""
    rng = np.random.default_rng(1000 + seed)
    return {"name": f"ff-prefix-{seed}", "seed": seed, "model": "llama-2-7b", "hardware": "a100-80gb",
            "cost_model": {"kind": "roofline"},
            "engine": {"num_gpu_blocks": int(rng.integers(24, 60)), "max_model_len": 256, "block_size": 8},
            "workload": {"arrival": {"kind": "poisson", "rate": float(rng.uniform(2, 60))},
                         "lengths": {"kind": "vllm_random", "input_len": int(rng.integers(8, 40)),
                                     "output_len": int(rng.integers(4, 60)), "range_ratio": 0.5,
                                     "prefix_len": int(rng.choice([0, 8, 20])), "vocab_size": 7},
                         "num_requests": int(rng.integers(10, 40))},
            "schedulers": [{"preset": "vllm_v1", "max_num_seqs": int(rng.integers(2, 9)),
                            "max_num_batched_tokens": int(rng.integers(16, 128)),
                            "enable_prefix_caching": bool(seed % 4)}]}


@pytest.mark.parametrize("seed", range(32))
def test_fast_forward_equals_step_by_step_with_prefix_caching(seed):
    assert_fast_equals_stepwise(prefix_cache_scenario(seed))


@pytest.mark.parametrize("preset", ["vllm_v0", "sarathi"])
@pytest.mark.parametrize("seed", range(12))
def test_fast_forward_equals_step_by_step_for_v0_and_sarathi_under_kv_pressure(preset, seed):
    # Their decoders also form a cohort (every decoder gets its token whatever its place); a
    # small KV cache makes decode steps preempt, which dissolves it.
    scenario = prefix_cache_scenario(seed)
    sched = scenario["schedulers"][0]
    assert_fast_equals_stepwise(with_scheduler(
        scenario, preset=preset, max_num_seqs=sched["max_num_seqs"],
        max_num_batched_tokens=max(sched["max_num_batched_tokens"], 256)))


class _WithoutStepTerms:
    """A cost model as seen by a plug-in without decode_step_terms: everything else delegated."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name: str):
        if name == "decode_step_terms":
            raise AttributeError(name)
        return getattr(self._model, name)


@pytest.mark.parametrize("seed", range(1, 66, 2))   # the roofline scenarios
def test_cohort_runs_priced_beforehand_equal_runs_priced_as_they_go(seed, monkeypatch):
    # A model with decode_step_terms has its cohort runs priced and carried out in one pass
    # (DecodeCohort.run); one without is priced first (plan_run) and carried out after
    # (carry_out). Hiding the roofline's terms must not change a byte.
    from simulator import decode_cohort
    prepared = prepare(validate_scenario(random_scenario(seed)))
    fused = simulate(prepared, prepared.runs[0])
    priced_as_they_go = 0
    original = decode_cohort.DecodeCohort.run

    def counting(self, terms_of, *args, **kwargs):
        nonlocal priced_as_they_go
        priced_as_they_go += terms_of is not None
        return original(self, terms_of, *args, **kwargs)

    monkeypatch.setattr(decode_cohort.DecodeCohort, "run", counting)
    prepared.cost_model = _WithoutStepTerms(prepared.cost_model)
    planned = simulate(prepared, prepared.runs[0])
    assert fingerprint(planned) == fingerprint(fused)
    assert priced_as_they_go == 0


def test_the_planned_way_is_taken_with_leavers_inside_runs():
    # The equality above means something only if planned runs with leavers happened.
    from simulator import decode_cohort
    leaves_inside = 0
    original = decode_cohort.DecodeCohort.carry_out

    def counting(self, ends_s, leave):
        def counting_leave(finished, end_s):
            nonlocal leaves_inside
            leaves_inside += end_s < ends_s[-1]
            leave(finished, end_s)
        return original(self, ends_s, counting_leave)

    decode_cohort.DecodeCohort.carry_out = counting
    try:
        for seed in range(1, 66, 2):
            prepared = prepare(validate_scenario(random_scenario(seed)))
            prepared.cost_model = _WithoutStepTerms(prepared.cost_model)
            simulate(prepared, prepared.runs[0])
    finally:
        decode_cohort.DecodeCohort.carry_out = original
    assert leaves_inside > 0


def test_prefix_cache_scenarios_hit_evict_and_finish_inside_runs():
    # The test above must exercise what it claims: cache hits, and runs that carry finishes.
    from simulator import fast_forward
    hits = finishes_in_runs = 0
    original = fast_forward.apply_decode_run

    def counting_apply(scheduler, run, on_finished):
        def counting_finished(finished, now_s):
            nonlocal finishes_in_runs
            finishes_in_runs += len(finished) if now_s < run.end_s[-1] else 0
            on_finished(finished, now_s)
        return original(scheduler, run, counting_finished)

    fast_forward.apply_decode_run = counting_apply
    import simulator.engine as engine
    engine.apply_decode_run = counting_apply
    try:
        for seed in range(16):
            out = simulate(*_prepared_run(prefix_cache_scenario(seed)))
            hits += sum(r.num_cached_tokens for r in out.result.requests)
    finally:
        fast_forward.apply_decode_run = original
        engine.apply_decode_run = original
    assert hits > 0 and finishes_in_runs > 0


def test_cohort_steps_dissolves_and_rejoins_in_the_v1_scenarios():
    # The equality tests above cover the decode cohort (simulator/decode_cohort.py) only if
    # the cohort stepped, was dissolved for a preemption or a block shortage, and was rejoined.
    from simulator.decode_cohort import DecodeCohort
    counts = {"begin": 0, "dissolve": 0, "join": 0}
    originals = {name: getattr(DecodeCohort, name) for name in ("begin_step", "dissolve", "join")}

    def counting(name):
        def wrapper(self, *args):
            counts[{"begin_step": "begin"}.get(name, name)] += 1
            return originals[name](self, *args)
        return wrapper

    for name in originals:
        setattr(DecodeCohort, name, counting(name))
    try:
        for seed in range(32):
            simulate(*_prepared_run(prefix_cache_scenario(seed)))
    finally:
        for name, original in originals.items():
            setattr(DecodeCohort, name, original)
    assert counts["begin"] > 1000 and counts["dissolve"] > 0 and counts["join"] > 500, counts


def _prepared_run(scenario: dict):
    prepared = prepare(validate_scenario(scenario))
    return prepared, prepared.runs[0]


def test_fast_forward_actually_skips_events():
    # Otherwise the equality test above would pass trivially. One replica, open loop: the serve
    # loop runs on SingleProcessClock, one timeout per wait.
    from simulator.clock import SingleProcessClock
    counts = []
    original = SingleProcessClock.timeout

    def counting_timeout(self, delay):
        counts[-1] += 1
        return original(self, delay)

    scenario = random_scenario(1)
    scenario["workload"] = {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 8},
                            "output_len": {"kind": "fixed", "value": 60}, "num_requests": 4}
    prepared = prepare(validate_scenario(scenario))
    SingleProcessClock.timeout = counting_timeout
    try:
        for fast_forward in (False, True):
            counts.append(0)
            simulate(prepared, prepared.runs[0], fast_forward=fast_forward)
    finally:
        SingleProcessClock.timeout = original
    slow, fast = counts
    assert slow >= 60 and fast < slow / 5


def _shipped_cost_models():
    from cost_models.profiles import profile_names
    models = []
    for name in profile_names():
        big = "70b" in name
        scenario = {"name": "price", "seed": 1, "model": "llama-2-70b" if big else "llama-3.1-8b",
                    "hardware": "a100-80gb", "cost_model": {"kind": "profiled", "profile": name},
                    "engine": {"tensor_parallel_size": 2 if big else 1},
                    "workload": {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 8},
                                 "output_len": {"kind": "fixed", "value": 8}, "num_requests": 1},
                    "schedulers": [{"preset": "vllm_v1"}]}
        try:
            with warnings.catch_warnings():   # a profile measured on a sibling model warns
                warnings.simplefilter("ignore", RuntimeWarning)
                models.append((name, prepare(validate_scenario(scenario)).cost_model))
        except Exception:   # a profile of another model family: its own tests cover it
            continue
    roofline = random_scenario(1)
    models.append(("roofline", prepare(validate_scenario(roofline)).cost_model))
    return models


def _shipped_models_with(method: str):
    """(name, the bound method) of every shipped cost model that has ``method``."""
    return [(name, getattr(model, method)) for name, model in _shipped_cost_models()
            if hasattr(model, method)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # shapes past a profile's fitted range
def test_many_decode_steps_are_priced_to_the_bit_like_one_at_a_time():
    # The multi-step advance prices a run's steps with decode_step_times_s; the single steps
    # use decode_step_time_s (via step_time_s): the floats must be the same.
    rng = np.random.default_rng(7)
    checked = 0
    for name, many in _shipped_models_with("decode_step_times_s"):
        one = many.__self__.decode_step_time_s
        for rows in (1, 3, 26, 97, 256):
            start = int(rng.integers(rows, rows * 900))
            steps = np.arange(50)
            longest = int(start // rows) + 5 + steps
            sums = start + steps * rows
            vector = many(rows, sums, longest)
            if vector is None:
                continue
            assert vector.tolist() == [one(rows, int(s), int(g)) for s, g in zip(sums, longest)], name
            checked += 1
    assert checked >= 10


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # shapes past a profile's fitted range
def test_a_models_own_decode_loop_gives_the_clock_of_one_step_at_a_time():
    # DecodeSegment prices short segments with the model's decode_step_ends loop; the single
    # steps add decode_step_time_s to the clock one at a time: every end time must be the same
    # float, with padded rows (context grows by more than the row count) and an arrival cutoff.
    rng = np.random.default_rng(11)
    checked = 0
    for name, loop in _shipped_models_with("decode_step_ends"):
        one = loop.__self__.decode_step_time_s
        for rows, pad in ((1, 0), (3, 0), (26, 2), (97, 0), (256, 5)):
            num_seqs, longest = rows + pad, int(rng.integers(100, 900))
            context_sum, now_s = int(rng.integers(rows, rows * 900)) + pad * longest, float(rng.uniform(0, 1e4))
            ends = loop(num_seqs, context_sum, num_seqs, longest, now_s, 40, math.inf)
            if ends is None:
                continue
            clock, expected = now_s, []
            for i in range(40):
                clock = clock + one(num_seqs, context_sum + i * num_seqs, longest + i)
                expected.append(clock)
            assert ends == expected, name
            cut = loop(num_seqs, context_sum, num_seqs, longest, now_s, 40, expected[16])
            assert cut == expected[:17], name   # the step starting at the arrival is not taken
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("seed", [2, 13, 14, 21])
def test_cohort_forgets_old_steps_without_changing_results(seed, monkeypatch):
    # The cohort drops step records no member needs (memory flat in steps); keep only 8 here
    # so that it happens many times in a small run.
    import simulator.decode_cohort as cohort_module
    monkeypatch.setattr(cohort_module, "_KEEP_STEPS", 8)
    assert_fast_equals_stepwise(prefix_cache_scenario(seed))


@pytest.mark.parametrize("variant", ["ft", "hf"])
@pytest.mark.parametrize("seed", range(10))
def test_fast_forward_equals_step_by_step_for_static_batches(variant, seed):
    # FT batches keep their decoders in a cohort and run through finishes (nothing is admitted
    # until the batch is done); HF batches stop at each finish (it changes the padded rows).
    scenario = random_scenario(seed)
    assert_fast_equals_stepwise(with_scheduler(
        scenario, preset="static", max_num_seqs=scenario["schedulers"][0]["max_num_seqs"],
        variant=variant))


def chunked_prefill_pressure_scenario(seed: int) -> dict:
    """vLLM V1 with prefix caching on synthetic prompts (no token ids: blocks are counted) and a
    KV cache small enough that a prompt chunk preempts the running tail while a decode cohort
    holds blocks: the preempted request's generated blocks get keys, so blocks get identities
    mid-step and the cohort's counted blocks must be settled (DecodeCohort.settle_blocks)."""
    rng = np.random.default_rng(seed)
    return {"name": f"ff-settle-{seed}", "seed": seed, "model": "llama-2-7b", "hardware": "a100-80gb",
            "cost_model": {"kind": "roofline"},
            "engine": {"num_gpu_blocks": int(rng.integers(26, 70)), "max_model_len": 256, "block_size": 8},
            "workload": {"arrival": {"kind": "poisson", "rate": float(rng.uniform(5, 60))},
                         "prompt_len": {"kind": "uniform", "low": 20, "high": 100},
                         "output_len": {"kind": "uniform", "low": 4, "high": 90},
                         "num_requests": int(rng.integers(10, 40))},
            "schedulers": [{"preset": "vllm_v1", "max_num_seqs": int(rng.integers(3, 9)),
                            "max_num_batched_tokens": int(rng.integers(16, 64))}]}


def test_counted_cohort_blocks_settle_when_blocks_get_identities(monkeypatch):
    # Equal results both ways, and the settling path taken with members holding counted blocks
    # (seeds found by running 0..59; each of these settles at least once).
    from simulator.decode_cohort import DecodeCohort
    original, settled = DecodeCohort.settle_blocks, []

    def recording(self):
        settled.append(self._counted and len(self.members))
        return original(self)

    monkeypatch.setattr(DecodeCohort, "settle_blocks", recording)
    for seed in (22, 23, 37, 43, 51, 57, 59):
        assert_fast_equals_stepwise(chunked_prefill_pressure_scenario(seed))
    assert sum(1 for members in settled if members) >= 7
