"""Regenerate every shipped cost model file in cost_models/profiles/ from ../shared/reference
and from our own harness runs in calibration/data/.

    python -m cost_models.build_profiles [REFERENCE_DIR [NAME ...]]   (NAME: only these files)
    python -m cost_models.build_profiles --physics | --roofline [REFERENCE_DIR]   (those files alone)

Each file is derived (fitted coefficients or compact tables with provenance and held-out error);
none is a copy of the published rows.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

from cost_models.batch_shape import BatchShape
from cost_models.fit.run import FitRequest, run_fit, write_outputs
from cost_models.profiles import PROFILES_DIR, load_cost_model

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO / ".." / "shared" / "reference"
HARNESS_DATA = REPO / "calibration" / "data"
_LSS = "llmservingsim/profiles"
_VIDUR = "vidur-profiles"


def requests(ref: Path) -> list[FitRequest]:
    jobs = [  # vLLM 0.19 kernel tables: no per-step time beyond the kernels (overlapped_cpu_overhead)
        FitRequest(ref / _LSS / "RTX4090/meta-llama/Llama-3.1-8B/bf16", name="rtx-4090-llama-3.1-8b",
                   step_overhead_s=0.0),
        FitRequest(ref / _LSS / "RTXPRO6000/meta-llama/Llama-3.1-8B/bf16", name="rtx-pro-6000-llama-3.1-8b",
                   step_overhead_s=0.0),
        FitRequest(ref / _LSS / "RTXPRO6000/Qwen/Qwen3-32B/bf16", name="rtx-pro-6000-qwen3-32b",
                   step_overhead_s=0.0),
        # MoE: expert timings (moe.csv) at tp 1 only, so only tp 1 is written.
        FitRequest(ref / _LSS / "RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16", model="qwen3-30b-a3b",
                   name="rtx-pro-6000-qwen3-30b-a3b", step_overhead_s=0.0),
    ]
    vidur = {("a100", "meta-llama/Llama-2-7b-hf"): "a100-llama-2-7b",
             ("a100", "meta-llama/Llama-2-70b-hf"): "a100-llama-2-70b",
             ("a100", "meta-llama/Meta-Llama-3-8B"): "a100-llama-3-8b",
             ("a100", "meta-llama/Meta-Llama-3-70B"): "a100-llama-3-70b",
             ("h100", "meta-llama/Llama-2-7b-hf"): "h100-llama-2-7b",
             ("h100", "meta-llama/Llama-2-70b-hf"): "h100-llama-2-70b"}
    for (gpu, model), name in vidur.items():
        jobs.append(FitRequest(ref / _VIDUR / "compute" / gpu / model / "mlp.csv", name=f"vidur-{name}",
                               all_reduce=ref / _VIDUR / "network" / f"{gpu}_dgx" / "all_reduce.csv"))
    for model in ("llama-3.1-8b", "qwen3-8b", "llama-2-7b"):
        for mode in ("cuda_graph", "eager"):
            jobs.append(FitRequest(ref / "h200" / "steps.csv", model=model, mode=mode, hardware="h200",
                                   name=f"h200-{model}-{mode}"))
    jobs.append(FitRequest(ref / "vllm-cpu" / "run2_closed_loop_iterations.csv", from_vllm_log=True,
                           model="tiny-llama", hardware="cpu", name="cpu-tiny-llama-vllm"))
    # Our own measurements (python -m calibration --grid cpu; see calibration/data/cpu-tiny-llama/).
    jobs.append(FitRequest(HARNESS_DATA / "cpu-tiny-llama", model="tiny-llama", mode="eager", hardware="cpu",
                           name="cpu-tiny-llama-harness"))
    # Our harness on one H200 (calibration/gpu_capture.sh; see calibration/data/h200/README.md).
    for model in ("llama-3.1-8b", "qwen3-8b"):
        for mode in ("cuda_graph", "eager"):
            jobs.append(FitRequest(HARNESS_DATA / "h200" / model, model=model, mode=mode, hardware="h200",
                                   name=f"h200-harness-{model}-{mode}"))
    return jobs


# The Vidur models of each GPU a physics file is fitted on (phi-2 left out: its parallel attention and
# MLP block, one LayerNorm a layer, is not a ModelSpec shape).
_VIDUR_COMMON = ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-70b-hf", "codellama/CodeLlama-34b-Instruct-hf",
                 "internlm/internlm-20b", "Qwen/Qwen-72B")
VIDUR_PHYSICS_MODELS = {"a100": _VIDUR_COMMON + ("meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-70B"),
                        "h100": _VIDUR_COMMON}


def physics_jobs(ref: Path) -> list[tuple[str, list[Path], str | None, str]]:
    """(name, sources, mode, hardware) of every shipped physics file (cost_models/physics.py)."""
    lss = ref / _LSS / "RTXPRO6000"
    return [(f"physics-h200-{mode}", [ref / "h200" / "steps.csv"], mode, "h200") for mode in ("cuda_graph", "eager")] + [
        ("physics-rtx-pro-6000-kernels", [lss / "meta-llama/Llama-3.1-8B/bf16", lss / "Qwen/Qwen3-32B/bf16",
                                          lss / "Qwen/Qwen3-30B-A3B-Instruct-2507/bf16"], None, ""),
        # One model: no leave-one-model-out figure (cost_models/profiles/README.md).
        ("physics-rtx-4090-kernels", [ref / _LSS / "RTX4090/meta-llama/Llama-3.1-8B/bf16"], None, "")] + [
        # Vidur: every model servesim describes (not phi-2: cost_models/profiles/README.md); the one
        # attention profile is the A100's, so the H100 file has no attention.
        (f"physics-{gpu}-kernels", [ref / _VIDUR / "compute" / gpu / m / "mlp.csv" for m in models]
         + ([ref / _VIDUR / "legacy/a100/attention.csv"] if gpu == "a100" else []), None, "")
        for gpu, models in VIDUR_PHYSICS_MODELS.items()]


def roofline_jobs(ref: Path) -> dict[str, tuple[list[Path], str | None, str]]:
    """GPU -> (sources, mode, phrase) the roofline's defaults are fitted on (cost_models/fit/roofline_fit.py):
    every GPU whose whole steps the shared data measured, in the mode vLLM serves in (CUDA graphs)."""
    lss = ref / _LSS
    return {
        "h200": ([ref / "h200" / "steps.csv"], "cuda_graph",
                 "../shared/reference/h200/steps.csv, CUDA graph (plain-PyTorch harness; CUDA-event step times)"),
        "rtx-pro-6000": ([lss / "RTXPRO6000/meta-llama/Llama-3.1-8B/bf16", lss / "RTXPRO6000/Qwen/Qwen3-32B/bf16",
                          lss / "RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16"], None,
                         "LLMServingSim vLLM 0.19 kernel sums, ../shared/reference/llmservingsim/profiles/RTXPRO6000 (tp 1)"),
        "rtx-4090": ([lss / "RTX4090/meta-llama/Llama-3.1-8B/bf16"], None,
                     "LLMServingSim vLLM 0.19 kernel sums, ../shared/reference/llmservingsim/profiles/RTX4090 (tp 1)")}


def build_roofline(ref: Path) -> None:
    import json
    from cost_models.fit.physics_sources import read_physics_sources
    from cost_models.fit.roofline_fit import defaults_json
    from cost_models.roofline_defaults import DEFAULTS_PATH, reload_defaults
    fits = {gpu: (read_physics_sources(sources, mode, gpu), phrase)
            for gpu, (sources, mode, phrase) in roofline_jobs(ref).items()}
    data = defaults_json(fits)
    DEFAULTS_PATH.write_text(json.dumps(data, indent=1) + "\n")
    reload_defaults()   # the physics files built next read the new defaults
    for gpu, entry in data["gpus"].items():
        print(gpu, {k: entry[k] for k in ("compute_efficiency", "bandwidth_efficiency", "step_overhead_s", "launch_s")},
              {f: e["mape_pct"] for f, e in entry["train_errors"].items()})
    print("other GPUs", data["other_gpus"])


def overlapped_cpu_overhead(data: dict) -> dict:
    """The ``step_overhead`` block of a vLLM 0.19 kernel-table profile: 0 s, and why.

    The GPU's shortest step (one decode, from the tables) bounds from below how much CPU work per
    step async scheduling can hide; the CPU work itself is bounded by our vLLM-CPU logs.
    """
    tp = min(data["tensor_parallel"], key=int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        floor_s = load_cost_model(data, int(tp), 0.0).step_time_s(BatchShape.of([1], [16]))
    return {
        "seconds": 0.0,
        "mechanism": (
            "engine time per step beyond the kernels = CPU work not hidden under the GPU. vLLM 0.19 "
            "(the profiles' engine) schedules asynchronously by default: the CPU schedules and prepares "
            "step k+1 while the GPU runs step k, so only CPU work longer than the GPU step would add. "
            f"The shortest GPU step here is {floor_s * 1e3:.1f} ms (one decode, tp {tp}, from these "
            "tables); vLLM's CPU work per step is a few ms (our vLLM-CPU logs: 2.3-3.0 ms per step "
            "outside the forward pass, on a 2-core CPU; tests/data/vllm-cpu), so none is left over."),
        "components": {
            "scheduling_input_preparation_output_processing": "0 s: overlapped by async scheduling",
            "kernel_launches": "0 s: decode steps up to the CUDA-graph capture size replay one graph; "
                               "larger steps run >= 2x longer on the GPU than their launches take",
            "sampling": "in the tables: lm_head and sampler per sampled row (per_sequence.csv)",
            "cuda_graph_vs_eager": "tables are eager kernel intervals; graph replay runs the same "
                                   "kernels; gaps between kernels (~1 us) are not counted"},
        "source": "the mechanism above (no timing of a served run was used to set it). For a synchronous "
                  "engine (async scheduling off, or eager) set cost_model.step_overhead_s to its CPU "
                  "time per step."}


# The profiles whose step_overhead block is replaced by a derived one after the fit.
STEP_OVERHEAD_BLOCKS = {name: overlapped_cpu_overhead for name in
                        ("rtx-4090-llama-3.1-8b", "rtx-pro-6000-llama-3.1-8b", "rtx-pro-6000-qwen3-32b",
                         "rtx-pro-6000-qwen3-30b-a3b")}


def main(argv: list[str]) -> None:
    ref = Path(argv[0]) if argv else DEFAULT_REFERENCE
    only = set(argv[1:])
    if not ref.is_dir():
        raise SystemExit(f"{ref}: no reference folder")
    for request in requests(ref):
        if only and request.name not in only:
            continue
        outcome = run_fit(request)
        data = outcome.data
        data["source"]["files"] = {_relative(p, ref): s for p, s in data["source"]["files"].items()}
        if request.name in STEP_OVERHEAD_BLOCKS:
            data["step_overhead"] = STEP_OVERHEAD_BLOCKS[request.name](data)
        write_outputs(outcome, PROFILES_DIR / f"{request.name}.json", None)
        print(outcome.report.splitlines()[0])
    build_roofline(ref)
    build_physics(ref)   # after: a physics file prices a term no source measured by the roofline's defaults


def build_physics(ref: Path) -> None:
    from cost_models.fit.physics_run import run_physics_fit
    for name, sources, mode, hardware in physics_jobs(ref):
        outcome = run_physics_fit(sources, mode, hardware, name)
        data = outcome.data
        data["source"]["files"] = {_relative(p, ref): s for p, s in data["source"]["files"].items()}
        data["fitted_on"]["sources"] = [s.replace(str(ref), "../shared/reference") for s in data["fitted_on"]["sources"]]
        data["source"]["description"] = data["source"]["description"].replace(str(ref), "../shared/reference")
        for ceilings in data["measured_ceilings"].values():
            ceilings["file"] = _relative(ceilings["file"], ref)
        write_outputs(outcome, PROFILES_DIR / f"{name}.json", None)
        print(outcome.report)


def _relative(path: str, ref: Path) -> str:
    """Record sources as ../shared/reference/... or as repository paths, whatever folder the
    build ran from."""
    resolved = Path(path).resolve()
    for base, shown in ((ref.resolve(), Path("../shared/reference")), (REPO, Path("."))):
        if resolved.is_relative_to(base):
            return str(shown / resolved.relative_to(base))
    return path


if __name__ == "__main__":
    if sys.argv[1:2] == ["--physics"]:   # the physics files alone (the tables take minutes)
        build_physics(Path(sys.argv[2]) if sys.argv[2:] else DEFAULT_REFERENCE)
    elif sys.argv[1:2] == ["--roofline"]:   # the roofline's fitted defaults alone
        build_roofline(Path(sys.argv[2]) if sys.argv[2:] else DEFAULT_REFERENCE)
    else:
        main(sys.argv[1:])
