"""``servesim validate``: simulate a measured vLLM run from its own engine arguments and requests
and compare (measured.py with record.py and prompts.py -> rebuild.py with engine_settings.py -> runner
-> compare.py, plots.py; pipeline.py ties them)."""
from simulator.validate.compare import RunLatencies, compare, figures, format_table
from simulator.validate.measured import MeasuredRun, load_llmservingsim_run, load_measured, load_vllm_bench
from simulator.validate.pipeline import ValidateRequest, Validation, run_validation

__all__ = ["MeasuredRun", "RunLatencies", "ValidateRequest", "Validation", "compare", "figures",
           "format_table", "load_llmservingsim_run", "load_measured", "load_vllm_bench", "run_validation"]
