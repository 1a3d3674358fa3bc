"""The fast paths (the decode cohort and its multi-step runs, simulator/fastpath/) give exactly
the step-by-step results (design §3: "provided results equal the step-by-step run exactly (a
test proves it)") on random scenarios of every preset."""

import numpy as np
import pytest

from simulator.results.columns import REQUEST_COLUMNS
from simulator.results.files import request_file_columns, summary_json
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
    {"preset": "vllm_v1_spf"},
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
    """What the result files hold: requests.csv's columns, every step column, the summary."""
    rows = request_file_columns(out.requests.arrays())
    cols = out.steps.to_columns()
    return ({name: [None if v != v else v for v in rows[name].tolist()] for name in REQUEST_COLUMNS},
            {k: v.tolist() for k, v in cols.items()}, summary_json(out.summary))


def stepwise_and_fast(scenario: dict):
    prepared = prepare(validate_scenario(scenario))
    run = prepared.runs[0]
    return simulate(prepared, run, fast_path=False), simulate(prepared, run, fast_path=True)


def assert_fast_equals_stepwise(scenario: dict) -> None:
    stepwise, fast = stepwise_and_fast(scenario)
    assert fingerprint(fast) == fingerprint(stepwise)


def with_scheduler(scenario: dict, **scheduler) -> dict:
    """The scenario with its one scheduler replaced (same workload, engine and seed)."""
    return {**scenario, "schedulers": [scheduler]}


@pytest.mark.parametrize("seed", range(66))
def test_fast_path_equals_step_by_step(seed):
    assert_fast_equals_stepwise(random_scenario(seed))


@pytest.mark.parametrize("seed", range(0, 66, 3))
def test_fast_path_equals_step_by_step_without_kept_gaps(seed):
    # Without per-token gaps the ITL figures come from per-request summaries; the cohort takes
    # a member's sum of squared gaps as a difference of running sums; the rest is exact.
    scenario = random_scenario(seed)
    scenario["metrics"] = {"record_itl_gaps": False}
    stepwise, fast = stepwise_and_fast(scenario)
    std_slow, std_fast = stepwise.summary.pop("std_itl_ms"), fast.summary.pop("std_itl_ms")
    # With equal gaps the true std is 0 and E[x²] - E[x]² leaves rounding noise of order
    # sqrt(eps x the run's sum of squares) on either path (the cohort's differences of running
    # sums over a whole run): compare to 100 ns.
    assert std_fast == pytest.approx(std_slow, rel=1e-9, abs=1e-4)
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
def test_fast_path_equals_step_by_step_with_prefix_caching(seed):
    assert_fast_equals_stepwise(prefix_cache_scenario(seed))


@pytest.mark.parametrize("preset", ["vllm_v0", "sarathi"])
@pytest.mark.parametrize("seed", range(12))
def test_fast_path_equals_step_by_step_for_v0_and_sarathi_under_kv_pressure(preset, seed):
    # Their decoders also form a cohort (every decoder gets its token whatever its place); a
    # small KV cache makes decode steps preempt, which dissolves it.
    scenario = prefix_cache_scenario(seed)
    sched = scenario["schedulers"][0]
    assert_fast_equals_stepwise(with_scheduler(
        scenario, preset=preset, max_num_seqs=sched["max_num_seqs"],
        max_num_batched_tokens=max(sched["max_num_batched_tokens"], 256)))


@pytest.mark.parametrize("seed", range(0, 66, 5))
def test_fast_path_with_a_plain_cost_model(seed):
    # A cost model that is only step_time_s (no run method): the cohort's runs price it step by
    # step through cost_models.base.decode_steps_time_s, and the results still agree.
    prepared = prepare(validate_scenario(random_scenario(seed)))
    prepared.cost_model = PlainCostModel(prepared.cost_model)
    run = prepared.runs[0]
    assert fingerprint(simulate(prepared, run, fast_path=True)) == \
        fingerprint(simulate(prepared, run, fast_path=False))


class PlainCostModel:
    """Another model's step_time_s and nothing else."""

    def __init__(self, model):
        self.step_time_s = model.step_time_s


def _counting(monkeypatch, cls, names):
    counts = dict.fromkeys(names, 0)
    for name in names:
        original = getattr(cls, name)

        def wrapper(self, *args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(cls, name, wrapper)
    return counts


def test_cohort_steps_dissolves_rejoins_and_runs_in_the_random_scenarios(monkeypatch):
    # The equality tests cover the decode cohort only if it stepped, ran, was dissolved (for a
    # preemption, a block shortage or block identities) and was rejoined.
    from simulator.fastpath.cohort import DecodeCohort
    counts = _counting(monkeypatch, DecodeCohort, ("_take_blocks", "dissolve", "_join", "decode_run"))
    for seed in range(66):
        simulate(*_prepared_run(random_scenario(seed)))
    for seed in range(60):
        simulate(*_prepared_run(chunked_prefill_pressure_scenario(seed)))
    assert counts["_take_blocks"] > 1000 and counts["dissolve"] > 20 and counts["_join"] > 500, counts
    assert counts["decode_run"] > 100, counts


def test_runs_carry_leavers_and_hit_the_prefix_cache(monkeypatch):
    # Runs with leavers inside them (not only at their last step), and prefix-cache hits.
    from simulator.fastpath.cohort import DecodeCohort
    original, inside = DecodeCohort.decode_run, [0]

    def counting(self, start_s, next_arrival_s, through, leave):
        ends = []

        def counting_leave(finished, end_s):
            ends.append(end_s)
            leave(finished, end_s)
        done = original(self, start_s, next_arrival_s, through, counting_leave)
        if done is not None:
            inside[0] += sum(1 for e in ends if e < done[0][-1])
        return done

    monkeypatch.setattr(DecodeCohort, "decode_run", counting)
    hits = 0
    for seed in range(1, 66, 2):
        simulate(*_prepared_run(random_scenario(seed)))
    for seed in range(16):
        out = simulate(*_prepared_run(prefix_cache_scenario(seed)))
        hits += sum(r.num_cached_tokens for r in out.requests.rows())
    assert hits > 0 and inside[0] > 0


def _prepared_run(scenario: dict):
    prepared = prepare(validate_scenario(scenario))
    return prepared, prepared.runs[0]


def test_fast_path_actually_skips_events(monkeypatch):
    # Otherwise the equality tests would pass trivially: count SimPy's timeouts.
    import simpy
    counts = []
    original = simpy.Environment.timeout

    def counting_timeout(self, delay, value=None):
        counts[-1] += 1
        return original(self, delay, value)

    scenario = random_scenario(1)
    scenario["workload"] = {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 8},
                            "output_len": {"kind": "fixed", "value": 60}, "num_requests": 4}
    prepared = prepare(validate_scenario(scenario))
    monkeypatch.setattr(simpy.Environment, "timeout", counting_timeout)
    for fast_path in (False, True):
        counts.append(0)
        simulate(prepared, prepared.runs[0], fast_path=fast_path)
    slow, fast = counts
    assert slow >= 60 and fast < slow / 5


@pytest.mark.parametrize("seed", [2, 13, 14, 21])
def test_cohort_forgets_old_steps_without_changing_results(seed, monkeypatch):
    # The cohort drops step records no member needs (memory flat in steps); keep only 8 here
    # so that it happens many times in a small run.
    import simulator.fastpath.step_ends as step_ends
    monkeypatch.setattr(step_ends, "_KEEP_STEPS", 8)
    assert_fast_equals_stepwise(prefix_cache_scenario(seed))


@pytest.mark.parametrize("variant", ["ft", "hf"])
@pytest.mark.parametrize("seed", range(10))
def test_fast_path_equals_step_by_step_for_static_batches(variant, seed):
    # FT batches keep their decoders in a cohort and run through finishes (nothing is admitted
    # until the batch is done); HF batches go step by step (a finish changes the padded rows).
    scenario = random_scenario(seed)
    assert_fast_equals_stepwise(with_scheduler(
        scenario, preset="static", max_num_seqs=scenario["schedulers"][0]["max_num_seqs"],
        variant=variant))


def chunked_prefill_pressure_scenario(seed: int) -> dict:
    """vLLM V1 with prefix caching on synthetic prompts (no token ids: blocks are counted) and a
    KV cache small enough that a prompt chunk preempts the running tail while a decode cohort
    holds blocks: the preempted request's generated blocks get keys, so blocks get identities
    mid-step and the cohort's counted blocks must be credited first."""
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


def test_counted_cohort_blocks_are_credited_when_blocks_get_identities(monkeypatch):
    # Equal results both ways, and the crediting path taken with members holding counted blocks
    # (seeds found by running 0..59).
    from simulator.fastpath.cohort import DecodeCohort
    original, credited = DecodeCohort.credit_counted_blocks, []

    def recording(self):
        credited.append(len(self.members))
        return original(self)

    monkeypatch.setattr(DecodeCohort, "credit_counted_blocks", recording)
    for seed in (22, 23, 37, 43, 45, 57, 59):
        assert_fast_equals_stepwise(chunked_prefill_pressure_scenario(seed))
    assert sum(1 for members in credited if members) >= 7
