"""``servesim validate``: simulate a measured vLLM run from its own engine arguments and requests,
and print measured vs simulated vs error % (simulator/validate/pipeline.py does the work)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

ASYNC_MODES = ("on", "off", "auto")
ARRIVAL_MODES = ("auto", "replay", "closed-loop")


@click.command("validate")
@click.argument("run", required=False, type=click.Path(path_type=Path))
@click.option("--bench-json", type=click.Path(dir_okay=False, path_type=Path),
              help="vllm bench serve --save-result --save-detailed JSON (instead of RUN).")
@click.option("--iteration-log", type=click.Path(dir_okay=False, path_type=Path),
              help="The same server's --enable-logging-iteration-details log, or its *_iterations.csv.")
@click.option("--engine-args", type=click.Path(dir_okay=False, path_type=Path),
              help="JSON of the bench server's vLLM engine arguments, or a run's meta.json (its "
                   "resolved_config is read too); a bench file needs it.")
@click.option("--prompts", type=click.Path(dir_okay=False, path_type=Path),
              help="JSONL of the run's prompts with token ids (input_tok_ids), one line per request in the "
                   "dataset's order, e.g. the dataset the bench used: prefix caching sees the real prompts.")
@click.option("--cost-model", "cost_model", required=True, metavar="PROFILE|FILE|roofline|fit",
              help="A shipped profile (servesim profiles), a cost model file, 'roofline', or 'fit' "
                   "(fit the iteration log now).")
@click.option("--hardware", help="Hardware preset (default: the cost model's; a CPU run needs none).")
@click.option("--model", help="Model preset or config.json (default: the run's model).")
@click.option("--num-gpu-blocks", type=click.IntRange(min=2), help="KV blocks (default: recorded or derived).")
@click.option("--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True),
              help="For deriving KV blocks from GPU memory (default: recorded or vLLM's).")
@click.option("--async-scheduling", type=click.Choice(ASYNC_MODES), default="auto", show_default=True,
              help="auto: as the recorded vLLM would (off on CPU, on from vLLM 0.12, assumed).")
@click.option("--step-overhead-ms", metavar="MS|auto",
              help="Per-step CPU overhead for the cost model; auto adds what the iteration log misses.")
@click.option("--client-overhead-ms", metavar="MS|auto",
              help="Client round trip (HTTP, tokenisation, streaming) added to simulated TTFT and E2E; "
                   "auto measures it on requests that found the engine idle.")
@click.option("--arrivals", type=click.Choice(ARRIVAL_MODES), default="auto", show_default=True,
              help="replay: the engine's arrival times; closed-loop: the client's, with its max-concurrency; "
                   "auto: closed-loop for a bench run with --max-concurrency, else replay.")
@click.option("--fit-scope", type=click.Choice(("run", "log")), default="run", show_default=True,
              help="With --cost-model fit: this run's steps, or the whole iteration log.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a field of the rebuilt scenario, e.g. --set schedulers.0.max_num_seqs=64.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (default: results/validate-<run name>).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
def validate(run, bench_json, iteration_log, engine_args, prompts, cost_model, hardware, model, num_gpu_blocks,
             gpu_memory_utilization, async_scheduling, step_overhead_ms, client_overhead_ms, arrivals, fit_scope,
             overrides, out_dir, no_plots):
    """Compare servesim with a measured vLLM RUN (an LLMServingSim run folder or a bench JSON)."""
    from simulator.engine.progress import NoProgressError
    from simulator.scenario import ScenarioError
    from simulator.validate.compare import format_table
    from simulator.validate.pipeline import VALIDATION_JSON, ValidateRequest, run_validation
    if (run is None) == (bench_json is None):
        raise click.UsageError("give exactly one of RUN (a run folder or bench JSON) or --bench-json FILE")
    source = run or bench_json
    try:
        request = ValidateRequest(
            run=source, cost_model=cost_model,
            out_dir=out_dir or Path("results") / f"validate-{_run_name(source)}",
            iteration_log=iteration_log, engine_args=_engine_args(engine_args),
            engine_args_origin=str(engine_args), prompts=prompts, model=model, hardware=hardware,
            num_gpu_blocks=num_gpu_blocks, gpu_memory_utilization=gpu_memory_utilization,
            async_scheduling=async_scheduling, step_overhead_ms=step_overhead_ms,
            client_overhead_ms=client_overhead_ms, arrivals=arrivals,
            fit_scope=fit_scope, overrides=tuple(overrides), plots=not no_plots)
        v = run_validation(request)
    except (ScenarioError, NoProgressError, ValueError) as exc:
        click.echo(f"error: {str(exc).splitlines()[0]}", err=True)
        sys.exit(2)
    summary = v.output.summary
    click.echo(f"{v.measured.name}: {len(v.measured)} measured requests ({v.measured.source})")
    click.echo(f"simulated: {summary['model']} on {summary['hardware']}, vllm_v1 max_num_seqs "
               f"{summary['max_num_seqs']}, max_num_batched_tokens {summary['max_num_batched_tokens']}, "
               f"{summary['num_steps']} steps, {summary['num_preemptions']} preemptions")
    click.echo(f"cost model: {v.cost.description}")
    for note in v.notes:
        click.echo(f"  - {note}")
    click.echo(format_table(v.rows))
    click.echo(f"wrote {request.out_dir / VALIDATION_JSON}")
    for path in v.files:
        if path.suffix == ".png":
            click.echo(f"plot: {path}")


def _engine_args(path: Path | None) -> dict | None:
    """The whole JSON: flat vLLM arguments, or a meta.json whose sections record.py reads."""
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--engine-args: {path} is not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"--engine-args: {path} holds a {type(data).__name__}, not a JSON object of "
                         f"engine arguments")
    return data


def _run_name(source: Path) -> str:
    return source.name if source.is_dir() else source.stem   # a folder's name may hold dots
