"""Regenerate every shipped cost model file in cost_models/profiles/ from ../shared/reference
and from our own harness runs in calibration/data/.

    python -m cost_models.build_profiles [REFERENCE_DIR]

Each file is derived (fitted coefficients or compact tables with provenance and held-out error);
none is a copy of the published rows.
"""
from __future__ import annotations

import sys
from pathlib import Path

from cost_models.fit.run import FitRequest, run_fit, write_outputs
from cost_models.profiles import PROFILES_DIR

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO / ".." / "shared" / "reference"
HARNESS_DATA = REPO / "calibration" / "data"
_LSS = "llmservingsim/profiles"
_VIDUR = "vidur-profiles"


def requests(ref: Path) -> list[FitRequest]:
    jobs = [
        FitRequest(ref / _LSS / "RTX4090/meta-llama/Llama-3.1-8B/bf16", name="rtx-4090-llama-3.1-8b"),
        FitRequest(ref / _LSS / "RTXPRO6000/meta-llama/Llama-3.1-8B/bf16", name="rtx-pro-6000-llama-3.1-8b"),
        FitRequest(ref / _LSS / "RTXPRO6000/Qwen/Qwen3-32B/bf16", name="rtx-pro-6000-qwen3-32b"),
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


def main(argv: list[str]) -> None:
    ref = Path(argv[0]) if argv else DEFAULT_REFERENCE
    if not ref.is_dir():
        raise SystemExit(f"{ref}: no reference folder")
    for request in requests(ref):
        outcome = run_fit(request)
        data = outcome.data
        data["source"]["files"] = {_relative(p, ref): s for p, s in data["source"]["files"].items()}
        write_outputs(outcome, PROFILES_DIR / f"{request.name}.json", None)
        print(outcome.report.splitlines()[0])


def _relative(path: str, ref: Path) -> str:
    """Record sources as ../shared/reference/... or as repository paths, whatever folder the
    build ran from."""
    resolved = Path(path).resolve()
    for base, shown in ((ref.resolve(), Path("../shared/reference")), (REPO, Path("."))):
        if resolved.is_relative_to(base):
            return str(shown / resolved.relative_to(base))
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
