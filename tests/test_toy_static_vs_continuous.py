"""The issue's acceptance toy: unit cost model, 4 slots, 16 requests released at t=0, prompt 16.

Every step costs 1 s and a whole 16-token prompt takes one step, so a request with output O holds
its slot for exactly O steps: the prefill step samples the first token (semantics rule 1.3.1, trap
1) and O - 1 decode steps sample the rest. A finished request's slot is usable from the next step
(rule 1.3.3, trap 9). Hence, with all requests present at t=0 and no idle step:

- static (semantics §6, no refill): batches are consecutive groups of 4 in arrival order and each
  runs max(O) steps, so steps = sum over groups of the group's longest output;
- continuous (Orca §5; vLLM V1 §1 with max_num_seqs 4 and a budget far above 4 prompts): a slot is
  refilled the step after it frees, in arrival order, so steps = the makespan of greedy list
  scheduling of the outputs, in arrival order, onto 4 machines.

Both are worked out by hand below for the two scenario files and asserted exactly.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from simulator.runner import prepare, simulate
from simulator.scenario import load_scenario, validate_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

# toy_unit.yaml's outputs (uniform 1..32, seed 0), in arrival order, as the workload draws them.
VARIED_OUTPUTS = [28, 21, 17, 9, 10, 2, 3, 1, 6, 27, 21, 30, 17, 20, 32, 24]
# Static: groups [28 21 17 9] [10 2 3 1] [6 27 21 30] [17 20 32 24] -> 28 + 10 + 30 + 32.
STATIC_VARIED_STEPS = 100
# Continuous, slot free times after each admission (ties: either slot, same result):
#   28 21 17 9 | 10->19 2->19 3->22 1->20 6->26 27->48 21->43 30->56 17->45 20->63 32->77 24->72
# makespan 77 (lower bound sum/4 = 268/4 = 67).
CONTINUOUS_VARIED_STEPS = 77
# Equal outputs of 16: four waves of 4 under both policies, 4 x 16 = 64 steps; continuous
# batching cannot beat it because every slot is busy every step in both.
EQUAL_STEPS = 64

VLLM_V1_4_SLOTS = {"preset": "vllm_v1", "max_num_seqs": 4, "max_num_batched_tokens": 4096}


@lru_cache(maxsize=None)
def _runs(file_name: str) -> dict:
    """Every scheduler of the scenario plus vLLM V1 with 4 slots: label -> RunOutput (read only)."""
    path = SCENARIOS / file_name
    raw = yaml.safe_load(path.read_text())
    raw["schedulers"] = raw["schedulers"] + [VLLM_V1_4_SLOTS]
    prepared = prepare(validate_scenario(raw, base_dir=path.parent))
    return {run.label: simulate(prepared, run) for run in prepared.runs}


def _num_steps(output) -> int:
    return len(output.result.step_log)


def _list_schedule_makespan(outputs: list[int], num_slots: int) -> int:
    """Greedy list scheduling in arrival order (the hand rule above, as a second opinion)."""
    free_at = [0] * num_slots
    for steps in outputs:
        i = free_at.index(min(free_at))
        free_at[i] += steps
    return max(free_at)


def test_toy_scenario_draws_the_hand_worked_outputs():
    prepared = prepare(load_scenario(SCENARIOS / "toy_unit.yaml"))
    assert prepared.trace.max_output_tokens.tolist() == VARIED_OUTPUTS
    assert prepared.trace.num_prompt_tokens.tolist() == [16] * 16
    assert prepared.trace.arrival_s.tolist() == [0.0] * 16
    assert _list_schedule_makespan(VARIED_OUTPUTS, 4) == CONTINUOUS_VARIED_STEPS
    assert sum(max(VARIED_OUTPUTS[i:i + 4]) for i in range(0, 16, 4)) == STATIC_VARIED_STEPS


def test_continuous_batching_finishes_varied_lengths_in_fewer_steps_than_static():
    runs = _runs("toy_unit.yaml")
    assert _num_steps(runs["static"]) == STATIC_VARIED_STEPS
    assert _num_steps(runs["orca"]) == CONTINUOUS_VARIED_STEPS
    assert _num_steps(runs["vllm_v1"]) == CONTINUOUS_VARIED_STEPS
    for label, out in runs.items():
        assert out.summary["completed"] == 16, label
        assert out.summary["total_output_tokens"] == sum(VARIED_OUTPUTS), label
        assert out.result.end_s == float(_num_steps(out)), label   # unit steps, never idle


def test_equal_lengths_bring_static_and_continuous_to_the_same_step_count():
    runs = _runs("toy_unit_equal.yaml")
    assert {label: _num_steps(out) for label, out in runs.items()} == {
        "static": EQUAL_STEPS, "orca": EQUAL_STEPS, "vllm_v1": EQUAL_STEPS}
    for label, out in runs.items():
        assert out.summary["total_output_tokens"] == 16 * 16, label


def test_continuous_gain_shrinks_when_lengths_are_equal():
    varied, equal = _runs("toy_unit.yaml"), _runs("toy_unit_equal.yaml")
    gain_varied = _num_steps(varied["static"]) - _num_steps(varied["orca"])
    gain_equal = _num_steps(equal["static"]) - _num_steps(equal["orca"])
    assert (gain_varied, gain_equal) == (STATIC_VARIED_STEPS - CONTINUOUS_VARIED_STEPS, 0)
