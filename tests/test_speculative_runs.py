"""Speculative decoding through the scenario path: cost, metrics, determinism and refusals
(docs/speculative-decoding-semantics.md, rules S3, S7, S8, S9)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from cost_models.batch_shape import BatchShape
from cost_models.speculative import SpeculativeStepCost
from cost_models.unit import UnitCostModel
from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError, validate_scenario

K = 3
OUT = 1 + 5 * (K + 1)   # the first token, then five verify steps of k + 1 tokens at acceptance 1
BASE = {
    "name": "spec", "model": "llama-2-7b", "hardware": "h100-sxm",
    "cost_model": {"kind": "roofline"},
    "engine": {"max_model_len": 4096},
    # One request at a time: a lightly loaded engine.
    "workload": {"arrival": {"kind": "constant", "rate": 0.5},
                 "prompt_len": {"kind": "fixed", "value": 512},
                 "output_len": {"kind": "fixed", "value": OUT}, "num_requests": 4},
    "schedulers": [{"preset": "vllm_v1"}],
}


def _run(speculative=None, **changes):
    raw = copy.deepcopy(BASE)
    if speculative is not None:
        raw["engine"]["speculative"] = speculative
    for key, value in changes.items():
        raw[key] = value
    prepared = prepare(validate_scenario(raw))
    return prepared, simulate(prepared, prepared.runs[0])


def _ngram(rate: float, k: int = K) -> dict:
    return {"method": "ngram", "num_speculative_tokens": k, "acceptance_rates": [rate] * k}


def _step_s(prepared, new: int, context: int) -> float:
    return prepared.cost_model.step_time_s(BatchShape.of([new], [context]))


def test_tpot_with_full_acceptance_and_a_free_draft_falls_by_the_predicted_factor():
    """Rule S7: a verify step prices 1 + k tokens; at acceptance 1 it emits k + 1 of them, so
    TPOT = t_verify / (k + 1) against t_decode: the ratio of the two step times at the mean
    decode context, from the same cost model."""
    base_p, base = _run()
    spec_p, spec = _run(_ngram(1.0))
    mid = 512 + OUT // 2
    predicted = _step_s(spec_p, 1 + K, mid) / (K + 1) / _step_s(base_p, 1, mid)
    measured = spec.summary["mean_tpot_ms"] / base.summary["mean_tpot_ms"]
    assert predicted < 0.3                         # memory-bound: 4 tokens cost about one
    assert measured == pytest.approx(predicted, rel=0.02)
    # One chunk per verify step (rule S8): ITL is the step time, TPOT a (k + 1)-th of it.
    assert spec.summary["mean_itl_ms"] == pytest.approx(spec.summary["mean_tpot_ms"] * (K + 1))
    assert spec.summary["spec_decode_mean_acceptance_length"] == K + 1
    assert spec.summary["spec_decode_acceptance_rate"] == 1.0


def test_tpot_with_no_acceptance_rises_by_the_verify_cost():
    """Rules S3, S7: every draft rejected: one token per verify step, TPOT = t_verify."""
    base_p, base = _run()
    spec_p, spec = _run(_ngram(0.0))
    mid = 512 + OUT // 2
    predicted = _step_s(spec_p, 1 + K, mid) / _step_s(base_p, 1, mid)
    measured = spec.summary["mean_tpot_ms"] / base.summary["mean_tpot_ms"]
    assert predicted > 1.0
    assert measured == pytest.approx(predicted, rel=0.02)
    assert spec.summary["mean_itl_ms"] == pytest.approx(spec.summary["mean_tpot_ms"])
    assert spec.summary["spec_decode_num_accepted_tokens"] == 0


def test_the_summary_counts_drafts_as_vllm_does():
    """Rule S8: rates 1, 0.5, 0: position 0 always, position 2 never accepted."""
    _, out = _run({"method": "ngram", "num_speculative_tokens": 3,
                   "acceptance_rates": [1.0, 0.5, 0.0]})
    s = out.summary
    drafts, per_pos = s["spec_decode_num_drafts"], s["spec_decode_num_accepted_tokens_per_pos"]
    assert per_pos[0] == drafts and per_pos[2] == 0 and 0 < per_pos[1] < drafts
    assert s["spec_decode_num_accepted_tokens"] == sum(per_pos)
    assert s["spec_decode_acceptance_rate"] == s["spec_decode_num_accepted_tokens"] / s["spec_decode_num_draft_tokens"]
    assert s["spec_decode_mean_acceptance_length"] == 1 + sum(per_pos) / drafts
    assert s["spec_decode_acceptance_rate_per_pos"] == [n / drafts for n in per_pos]
    assert (out.requests.arrays()["num_output_tokens"] == OUT).all()


def test_same_seed_same_run_and_the_draws_follow_the_seed():
    """Randomness only from the run's generator: two runs of one seed agree exactly; another
    seed draws other acceptances."""
    spec = {"method": "eagle", "num_speculative_tokens": 2, "mean_acceptance_length": 2.0}
    _, one = _run(spec)
    _, two = _run(spec)
    a, b = one.requests.arrays(), two.requests.arrays()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    _, other = _run(spec, seed=1)
    assert other.summary["spec_decode_num_accepted_tokens"] != one.summary["spec_decode_num_accepted_tokens"]


def test_a_model_proposer_adds_k_passes_after_each_sampling_step():
    """Rule S7: a unit-cost proposer of 0.25 s: one pass over the step, k - 1 decode passes;
    a step of partial prefill chunks only proposes nothing."""
    cost = SpeculativeStepCost(UnitCostModel(1.0), UnitCostModel(0.25), 3, proposer_cpu_s=0.01)
    verify = BatchShape.of([4, 1], [100, 50], [True, True])
    assert cost.step_time_s(verify) == pytest.approx(1.0 + 0.01 + 3 * 0.25)
    chunk = BatchShape.of([64], [0], [False])
    assert cost.step_time_s(chunk) == 1.0
    assert SpeculativeStepCost(UnitCostModel(1.0), None, 3, 0.0).step_time_s(verify) == 1.0


def test_a_draft_model_and_an_eagle_head_cost_more_than_ngram():
    """Rule S7: the same run, priced with each proposer: ngram's free proposals are cheapest, a
    one-layer head next, a 7B drafter (llama-2-7b as its own draft) most."""
    times = {}
    for method, extra in (("ngram", {}), ("eagle", {}), ("draft_model", {"draft_model": "llama-2-7b"})):
        _, out = _run({"method": method, "num_speculative_tokens": 2, "acceptance_rates": [1.0, 1.0],
                       **extra})
        times[method] = out.summary["mean_tpot_ms"]
    assert times["ngram"] < times["eagle"] < times["draft_model"]


REFUSED = [
    ({"schedulers": [{"preset": "sglang"}]}, "engine.speculative"),
    ({"schedulers": [{"preset": "vllm_v1", "async_scheduling": True}]}, "schedulers.vllm_v1.async_scheduling"),
    ({"metrics": {"record_itl_gaps": False}}, "metrics.record_itl_gaps"),
]


@pytest.mark.parametrize("changes, field", REFUSED, ids=[f for _, f in REFUSED])
def test_unsupported_combinations_are_refused_in_one_line(changes, field):
    with pytest.raises(ScenarioError) as error:
        _run(_ngram(0.5), **changes)
    message = str(error.value)
    assert message.startswith(field) and "\n" not in message and "allowed" in message


BAD_OPTIONS = [
    ({"acceptance_rates": [0.5, 0.6, 0.1]}, "engine.speculative.acceptance_rates"),   # rising
    ({"acceptance_rates": [0.5]}, "engine.speculative.acceptance_rates"),             # not k
    ({"mean_acceptance_length": 2.0}, "engine.speculative.acceptance_rates"),         # both
    ({"acceptance_rates": None, "mean_acceptance_length": 4.5}, "engine.speculative.mean_acceptance_length"),
    ({"method": "draft_model"}, "engine.speculative.draft_model"),
    ({"num_speculative_tokens": 65, "acceptance_rates": [0.5] * 65}, "engine.speculative.num_speculative_tokens"),
]


@pytest.mark.parametrize("changes, field", BAD_OPTIONS, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_OPTIONS)])
def test_bad_speculative_options_are_refused_in_one_line(changes, field):
    spec = {**_ngram(0.5), **changes}
    spec = {k: v for k, v in spec.items() if v is not None}
    with pytest.raises(ScenarioError) as error:
        _run(spec)
    message = str(error.value)
    assert message.startswith(field) and "\n" not in message and "must" in message, message


def test_an_unknown_draft_model_is_refused_naming_the_field():
    with pytest.raises(ScenarioError) as error:
        _run({"method": "draft_model", "draft_model": "no-such-model", "num_speculative_tokens": 2,
              "acceptance_rates": [1.0, 0.0]})
    message = str(error.value)
    assert message.startswith("engine.speculative.draft_model: 'no-such-model'") and "preset" in message
