"""Every shipped scenario in scenarios/ runs, and every scheduler in it finishes every request.

Runs in-process through ``run_scenario_file`` (the body of `servesim run`); files that size the
workload with ``num_requests`` are cut to a few dozen requests to keep CI fast.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator.commands.run import run_scenario_file

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
SMALL_NUM_REQUESTS = 40


def small_overrides(raw: dict) -> tuple[str, ...]:
    n = raw["workload"].get("num_requests")
    return (f"workload.num_requests={SMALL_NUM_REQUESTS}",) if n and n > SMALL_NUM_REQUESTS else ()


def test_there_are_scenarios_to_run():
    assert len(SCENARIOS) >= 5


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_runs_and_every_scheduler_finishes_every_request(path: Path, tmp_path: Path):
    raw = yaml.safe_load(path.read_text())
    outputs = run_scenario_file(path, tmp_path, small_overrides(raw), plots=False)

    num_requests = min(raw["workload"]["num_requests"], SMALL_NUM_REQUESTS)
    sessions = raw["workload"].get("sessions")
    if sessions:   # num_requests counts conversations, here of a fixed number of turns
        num_requests *= sessions["num_turns"]["value"]
    assert len(outputs) == len(raw["schedulers"])
    for output in outputs:
        requests = output.requests.rows()
        assert len(requests) == num_requests
        assert all(r.finish_s >= r.last_token_s >= r.first_token_s >= r.arrival_s for r in requests)
        # ignore_eos: a request stops at max_tokens, or when the context is full (rule 1.3.2).
        max_model_len = raw["engine"]["max_model_len"]
        assert all(r.num_output_tokens == r.max_output_tokens
                   or r.num_prompt_tokens + r.num_output_tokens >= max_model_len for r in requests), output.label
        assert output.summary["completed"] == num_requests
        assert output.summary["num_unfinished"] == 0
        written = json.loads((tmp_path / output.label / "summary.json").read_text())
        assert written["completed"] == num_requests


def test_kv_starved_scenario_makes_the_paged_schedulers_preempt(tmp_path: Path):
    """The point of that scenario: 400 blocks for 64 seats forces recompute preemption."""
    path = ROOT / "scenarios" / "kv_starved_preemption.yaml"
    outputs = run_scenario_file(path, tmp_path, (f"workload.num_requests={SMALL_NUM_REQUESTS}",),
                                plots=False)
    assert all(o.summary["num_preemptions"] > 0 for o in outputs), \
        {o.label: o.summary["num_preemptions"] for o in outputs}
