"""``fit`` and ``profiles``: click commands the servesim CLI attaches (``main.add_command``).

    python -m cost_models.cli fit ../shared/reference/h200/steps.csv --model llama-3.1-8b \
        --mode cuda_graph --hardware h200 -o model.json --plot parity.png
    python -m cost_models.cli fit --from-vllm-log serve.log -o cpu.json
    python -m cost_models.cli profiles
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from cost_models.fit.run import FitRequest, run_fit, write_outputs
from cost_models.profiles import PROFILES_DIR, profile_names


@click.command("fit")
@click.argument("source", nargs=-1, type=click.Path(path_type=Path))
@click.option("--kind", type=click.Choice(["auto", "physics"]), default="auto", show_default=True,
              help="physics: one GPU and mode's efficiencies across every model in the SOURCES, "
                   "with leave-one-model-out error per family")
@click.option("--from-vllm-log", "vllm_log", type=click.Path(path_type=Path),
              help="vLLM serve log with --enable-logging-iteration-details lines, or its parsed *_iterations.csv")
@click.option("-o", "--out", type=click.Path(path_type=Path), help="cost model file to write (JSON)")
@click.option("--holdout-every", default=5, show_default=True, help="hold out every Nth shape (0: none)")
@click.option("--plot", type=click.Path(path_type=Path), help="parity plot PNG to write")
@click.option("--model", help="model rows to fit (timings with several models); preset name for tables")
@click.option("--mode", help="eager or cuda_graph rows (timings with both)")
@click.option("--hardware", default="", help="hardware preset, recorded and used for the roofline comparison")
@click.option("--name", help="name recorded in the file (default: HARDWARE-MODEL-MODE)")
@click.option("--all-reduce", type=click.Path(path_type=Path), help="Vidur network all_reduce.csv (with mlp.csv)")
@click.option("--request-lengths", type=click.Path(path_type=Path),
              help="--kind physics with a vLLM log: CSV of prompt_tokens, output_tokens per request, in "
                   "arrival order, to replay each logged step's shape")
def fit_command(source, kind, vllm_log, out, holdout_every, plot, model, mode, hardware, name, all_reduce,
                request_lengths):
    """Fit a step-cost model to TIMINGS_OR_PROFILE_DIR (or --from-vllm-log LOG) and report held-out error."""
    if kind == "physics":
        if not source or vllm_log is not None:
            raise click.UsageError("--kind physics: give one or more timings files or profile folders")
    elif (len(source) == 1) == (vllm_log is not None) or len(source) > 1:
        raise click.UsageError("give exactly one of TIMINGS_OR_PROFILE_DIR or --from-vllm-log LOG")
    try:
        if kind == "physics":
            from cost_models.fit.physics_run import run_physics_fit
            outcome = run_physics_fit(list(source), mode, hardware, name, model, request_lengths)
        else:
            outcome = run_fit(FitRequest(source=vllm_log or source[0], from_vllm_log=vllm_log is not None,
                                         model=model, mode=mode, hardware=hardware, holdout_every=holdout_every,
                                         name=name, all_reduce=all_reduce))
        write_outputs(outcome, out, plot)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(outcome.report)
    if out is not None:
        click.echo(f"wrote {out}")


@click.command("profiles")
def profiles_command():
    """List the shipped cost models: source, hardware, model, held-out MAPE per family."""
    for name in profile_names():
        data = json.loads((PROFILES_DIR / f"{name}.json").read_text())
        click.echo(f"{name}: {data['form']}, model {data['model']}, hardware {data['hardware']}, mode {data['mode']}")
        click.echo(f"  source: {data['source']['description']}")
        for tp, line in _error_lines(data):
            click.echo(f"  held-out MAPE{tp}: {line}")


def _error_lines(data: dict):
    if data["form"] == "physics":
        for model, errs in data["leave_one_model_out"].items():
            yield f" ({model}, leave-one-model-out)", _families(errs)
        return
    if data["form"] == "parametric":
        yield "", _families(data["holdout"]["errors"])
        return
    for tp, section in sorted(data["tensor_parallel"].items()):
        errs = section["holdout_errors"]
        parts = [f"dense {errs['dense_layer']['mape_pct']:.1f}%"]
        if "attention" in errs:
            parts.append("attention " + _families(errs["attention"]))
        yield f" (tp {tp})", ", ".join(parts)


def _families(errs: dict) -> str:
    return " ".join(f"{f} {e['mape_pct']:.1f}%" for f, e in errs.items() if f != "all" and e["n"])


if __name__ == "__main__":
    group = click.Group(commands={"fit": fit_command, "profiles": profiles_command})
    group()
