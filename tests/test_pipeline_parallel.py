"""Pipeline parallelism (docs/pipeline-parallel-semantics.md, rules P1-P5): vLLM's layer split,
the batch queue that keeps one batch in flight per stage, and what a stage costs."""
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from cost_models.hardware import load_hardware
from cost_models.memory import kv_block_bytes, num_gpu_blocks
from cost_models.model_spec import load_model
from cost_models.pipeline import p2p_send_s, pipeline_stages, stage_layers, stage_models
from cost_models.roofline import RooflineCostModel
from cost_models.unit import UnitCostModel
from cost_models.batch_shape import BatchShape
from simulator.cli import main
from simulator.core.request import Request
from simulator.engine.pipeline import max_concurrent_batches
from simulator.engine.simulation import Simulation
from simulator.results.step_table import StepTable
from tests.sched_helpers import make_scheduler


@dataclass(frozen=True)
class FixedStages:
    """Stages of a fixed time each and nothing to send: hand-workable timings."""
    num_stages: int
    stage_s: float = 1.0

    def stage_time_s(self, shape) -> float:
        return self.stage_s

    def send_s(self, shape) -> float:
        return 0.0


def _run(requests, num_stages, **options):
    s = make_scheduler("vllm_v1", max_num_seqs=4, block_size=4, enable_prefix_caching=False, **options)
    log = StepTable()
    Simulation(requests, [s], UnitCostModel(1.0), log, stages=[FixedStages(num_stages)]).run()
    return log.to_columns()


def test_vllm_splits_layers_evenly_and_gives_the_remainder_to_the_stages_before_the_last():
    # Rule P1 (vLLM get_pp_indices): 5 layers over 3 stages are 2, 2, 1; 13 over 4 are 3, 3, 4, 3.
    assert stage_layers(32, 4) == (8, 8, 8, 8)
    assert stage_layers(5, 3) == (2, 2, 1)
    assert stage_layers(13, 4) == (3, 3, 4, 3)
    assert stage_layers(80, 3) == (27, 27, 26)
    with pytest.raises(ValueError, match="engine.pipeline_parallel_size: 5 exceeds the model's 4 layers"):
        stage_layers(4, 5)


def test_a_pipelined_run_is_validated_with_async_scheduling_off():
    from simulator.validate.engine_settings import resolve_async_scheduling
    assert resolve_async_scheduling("auto", {"async_scheduling": True}, None, 2) == (
        False, "derived", "vLLM's V1 model runner turns it off under pipeline parallelism")
    assert resolve_async_scheduling("auto", {"async_scheduling": True}, None, 1)[0] is True


def test_the_batch_queue_holds_one_batch_per_stage():
    # Rule P3: vLLM's max_concurrent_batches (V1 model runner).
    assert [max_concurrent_batches(pp, False) for pp in (1, 2, 4)] == [1, 2, 4]
    assert [max_concurrent_batches(pp, True) for pp in (1, 2, 4)] == [2, 2, 4]


def test_two_groups_of_requests_fill_a_two_stage_pipeline():
    # Stages of 1 s, a budget of 4 tokens: A's prompt fills batch 1 (t=0), so B's goes to batch 2,
    # scheduled at t=0 too while batch 1 is in flight (rule P3). Batch 1 leaves stage 2 at 2, batch 2
    # enters stage 1 at 1 and leaves at 3; from then A and B alternate, each decode a round trip of
    # two stages while the pipeline finishes a batch every second (rule P4).
    a, b = Request(0, 0.0, 4, 3), Request(1, 0.0, 4, 3)
    steps = _run([a, b], 2, max_num_batched_tokens=4)
    assert (a.first_token_s, a.finish_s, b.first_token_s, b.finish_s) == (2.0, 6.0, 3.0, 7.0)
    assert steps["start_s"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert steps["end_s"].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert steps["num_tokens"].tolist() == [4, 4, 1, 1, 1, 1]


def test_a_request_in_flight_is_not_scheduled_again():
    # Rule P3: a decode whose token is still in the pipeline has no new token to schedule, so one
    # request alone runs one batch at a time, each a round trip through both stages.
    r = Request(0, 0.0, 4, 3)
    steps = _run([r], 2, max_num_batched_tokens=16)
    assert (r.first_token_s, r.finish_s) == (2.0, 6.0)
    assert steps["num_tokens"].tolist() == [4, 1, 1]


def test_a_late_arrival_waits_for_the_batch_the_engine_blocks_on():
    # B arrives at 0.5 while the engine waits for batch 1 (nothing else to schedule): it is seen at
    # t=2 and joins A's decode in one batch, as vLLM adds requests between engine steps.
    a, b = Request(0, 0.0, 4, 2), Request(1, 0.5, 4, 2)
    steps = _run([a, b], 2, max_num_batched_tokens=16)
    assert (a.first_token_s, a.finish_s, b.first_token_s, b.finish_s) == (2.0, 4.0, 4.0, 6.0)
    assert steps["num_tokens"].tolist() == [4, 5, 1]


def test_one_stage_is_the_step_itself():
    r = Request(0, 0.0, 4, 3)
    steps = _run([r], 1, max_num_batched_tokens=16)
    assert (r.first_token_s, r.finish_s) == (1.0, 3.0) and steps["end_s"].tolist() == [1.0, 2.0, 3.0]


def test_a_stage_runs_its_share_of_the_layers_and_sends_the_hidden_states():
    # Rules P4, P5: 80 layers over 3 stages, the longest 27; every stage pays the per-step overhead;
    # 1,000 tokens x (hidden + residual) x 8192 x 2 bytes = 32.8 MB over one direction of the H100's
    # 900 GB/s NVLink (450 GB/s): NCCL Simple, 8.4 + 3.4 us + 72.8 us = 84.6 us (LL: 295 us).
    model, hw = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    roofline = RooflineCostModel(model=model, hardware=hw, tensor_parallel_size=4)
    stages = pipeline_stages(roofline, model, hw, 3)
    shape = BatchShape.of([1000], [0])
    assert stages.layer_fraction == 27 / 80 and stages.overhead_s == roofline.step_overhead_s
    step_s = roofline.step_time_s(shape)
    assert stages.stage_time_s(shape) == pytest.approx(
        roofline.step_overhead_s + (step_s - roofline.step_overhead_s) * 27 / 80, rel=1e-12)
    assert stages.send_s(shape) == pytest.approx(8.4e-6 + 3.4e-6 + 32.768e6 / 450e9, rel=1e-9)
    assert p2p_send_s(32.768e6, hw) == stages.send_s(shape)
    one = pipeline_stages(roofline, model, hw, 1)
    assert one.stage_time_s(shape) == step_s and one.send_s(shape) == 0.0


def test_each_stage_sizes_its_cache_over_its_layers_and_the_least_wins():
    # Rule P2: each stage's GPU holds its layers' weights and KV (the first the embedding, the last
    # the lm_head and the sampler's peak); the pool is the fewest blocks of any stage.
    model, hw = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    first, last = stage_models(model, 2)
    assert (first.num_layers, last.num_layers) == (40, 40)
    assert kv_block_bytes(first, 4, 16) * 2 == kv_block_bytes(model, 4, 16)
    one = num_gpu_blocks(model, hw, 4, 0.9, 16, 8192, 256)
    two = num_gpu_blocks(model, hw, 4, 0.9, 16, 8192, 256, pipeline_parallel_size=2)
    # Half the layers' KV per block and about half the weights per GPU: more than twice the blocks.
    assert two > 2 * one
    assert stage_models(model, 1) == [model]


def _scenario(tmp_path, engine: str, preset: str = "vllm_v1") -> str:
    path = tmp_path / "pp.yaml"
    path.write_text(f"""name: pp
model: llama-3.1-8b
hardware: h100-sxm
cost_model: {{kind: roofline}}
engine: {engine}
workload:
  num_requests: 40
  arrival: {{kind: poisson, rate: 20}}
  prompt_len: {{kind: fixed, value: 3000}}
  output_len: {{kind: fixed, value: 40}}
schedulers:
  - {{preset: {preset}, max_num_batched_tokens: 1024}}
""")
    return str(path)


def test_a_pipelined_run_overlaps_its_steps_and_finishes_every_request(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", _scenario(tmp_path, "{pipeline_parallel_size: 2}"),
                                       "--no-plots", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "h100-sxm x1 x 2 stages" in result.output
    import pandas as pd
    steps = pd.read_csv(out / "vllm_v1" / "steps.csv")
    requests = pd.read_csv(out / "vllm_v1" / "requests.csv")
    assert len(requests) == 40 and (requests["num_output_tokens"] == 40).all()
    # Conservation: every prompt token and every output token but the first is computed once.
    assert steps["num_tokens"].sum() == 40 * 3000 + 40 * 39
    # A prompt's next chunk is scheduled while its last is in flight (rule P3): the steps overlap.
    assert (steps["start_s"].to_numpy()[1:] < steps["end_s"].to_numpy()[:-1]).any()


@pytest.mark.parametrize("engine, preset, message", [
    ("{pipeline_parallel_size: 2}", "sarathi",
     "error: engine.pipeline_parallel_size: 2 is modelled for vllm_v1's batch queue only; scheduler "
     "sarathi (sarathi) allows 1"),
    ("{pipeline_parallel_size: 33}", "vllm_v1",
     "error: engine.pipeline_parallel_size: 33 exceeds the model's 32 layers"),
    ("{pipeline_parallel_size: 0}", "vllm_v1", "error: engine.pipeline_parallel_size: 0"),
    # Rule P3: vLLM's V1 model runner turns async scheduling off under pipeline parallelism.
    ("{pipeline_parallel_size: 2}", "vllm_v1, async_scheduling: true",
     "error: schedulers.vllm_v1.async_scheduling: true is not modelled with engine.pipeline_parallel_size 2 "
     "(vLLM's V1 model runner turns it off there); allowed: false or unset"),
])
def test_pipeline_parallelism_outside_its_rules_is_refused_in_one_line(tmp_path, engine, preset, message):
    result = CliRunner().invoke(main, ["run", _scenario(tmp_path, engine, preset), "--no-plots",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.output.startswith(message), result.output
    assert len(result.output.strip().splitlines()) == 1
