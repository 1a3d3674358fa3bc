"""Sweeps: a scenario's ``sweep:`` block run as (scheduler x point x seed) into one sweep.csv.

``plan`` (what to run, validated up front), ``execute`` (``run_sweep``), ``table`` (the resumable
sweep.csv), ``backends`` (local processes or Ray), ``stats`` (means and 95% intervals over seeds),
``command`` (`servesim sweep`). Kept import-free so that `servesim --help` stays fast.
"""
