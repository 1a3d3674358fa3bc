"""The page's animated toy: the textbook static-vs-continuous picture, simulated, not drawn.

The toy is ``scenarios/toy_unit.yaml`` (every step costs 1 s, a 16-token prompt takes one step,
16 requests at t=0), written out here so an installed package needs no checkout. For each number
of slots and for equal or varied output lengths, the real simulator runs the ``static`` preset
and a continuous one (``orca``, as the toy file), recording which request holds which slot at
every step (``simulator.plots.timeline.record_timeline``); the page only plays those rows back.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

from simulator.plots.timeline import COLUMNS, record_timeline
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario

TOY_SCENARIO = {
    "name": "toy-unit", "seed": 0, "model": "llama-2-7b", "hardware": "a100-80gb",
    "cost_model": {"kind": "unit", "fixed_step_time_s": 1.0},
    "engine": {"block_size": 16, "num_gpu_blocks": 10000, "max_model_len": 256},
    "workload": {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 16},
                 "output_len": {"kind": "uniform", "low": 1, "high": 32}, "num_requests": 16},
}
# Varied: toy_unit.yaml's lengths; equal: toy_unit_equal.yaml's (16, about the varied mean).
OUTPUT_LENGTHS = {"equal": {"kind": "fixed", "value": 16},
                  "varied": {"kind": "uniform", "low": 1, "high": 32}}


@dataclass(frozen=True)
class ToyOptions:
    slots: tuple[int, ...] = tuple(range(1, 9))
    static: str = "static"
    continuous: str = "orca"
    # Orca's token budget far above the slots' prompts: only the slots limit a step, as in the toy.
    continuous_budget: int = 4096


def toy_scenario(slots: int, lengths: str, options: ToyOptions = ToyOptions()) -> dict:
    """The raw toy scenario with ``slots`` slots for both presets and these output lengths."""
    raw = copy.deepcopy(TOY_SCENARIO)
    raw["workload"]["output_len"] = copy.deepcopy(OUTPUT_LENGTHS[lengths])
    raw["schedulers"] = [
        {"preset": options.static, "max_num_seqs": slots},
        {"preset": options.continuous, "max_num_seqs": slots,
         "max_num_batched_tokens": options.continuous_budget}]
    return raw


def toy_case(slots: int, lengths: str, options: ToyOptions = ToyOptions()) -> dict:
    """Both presets on one toy configuration: each one's slot rows and what the run reports."""
    prepared = prepare(validate_scenario(toy_scenario(slots, lengths, options)))
    lanes = {}
    for role, run in zip(("static", "continuous"), prepared.runs):
        timeline = record_timeline(prepared, run)
        summary = simulate(prepared, run).summary
        lanes[role] = {
            "label": run.label, "rows": [list(r) for r in timeline.rows],
            "num_lanes": timeline.num_lanes, "finish_s": summary["duration"],
            "num_steps": summary["num_steps"], "output_throughput": summary["output_throughput"],
            "request_throughput": summary["request_throughput"]}
    return {"slots": slots, "lengths": lengths,
            "output_lens": prepared.trace.max_output_tokens.tolist(), **lanes}


def toy_data(options: ToyOptions = ToyOptions()) -> dict:
    """Every toy case (slots x lengths), with what the page needs to label them."""
    return {"slots": list(options.slots), "lengths": list(OUTPUT_LENGTHS),
            "columns": list(COLUMNS), "step_time_s": TOY_SCENARIO["cost_model"]["fixed_step_time_s"],
            "num_requests": TOY_SCENARIO["workload"]["num_requests"],
            "prompt_len": TOY_SCENARIO["workload"]["prompt_len"]["value"],
            "cases": [toy_case(k, lengths, options) for k in options.slots for lengths in OUTPUT_LENGTHS]}
