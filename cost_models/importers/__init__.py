"""Readers that turn published and measured timings into servesim's two internal forms.

- ``StepTimings``: whole-step times against batch shapes (our harness's timings.csv, the H200
  steps.csv, vLLM's iteration log); fitted by the parametric form.
- ``OperatorTables``: per-operator kernel times against tokens or sequences, plus attention points
  (LLMServingSim per-layer profiles, Vidur's mlp.csv and legacy attention.csv); turned into the table-driven profiled model.
"""
from cost_models.importers.forms import OperatorTables, Source, StepTimings, file_source
from cost_models.importers.harness import read_step_timings
from cost_models.importers.llmservingsim import read_llmservingsim
from cost_models.importers.vidur import read_vidur, read_vidur_attention

from cost_models.importers.vllm_log import read_vllm_log

__all__ = ["OperatorTables", "Source", "StepTimings", "file_source", "read_step_timings",
           "read_llmservingsim", "read_vidur", "read_vidur_attention", "read_vllm_log"]
