"""Fitting step-cost models to timings, with their held-out error (see cost_models/cli.py ``fit``)."""
