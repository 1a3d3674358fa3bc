"""servesim: a discrete-event simulator of LLM serving schedulers.

``simulator.run(scenario)`` is the Python API (simulator/api.py). It is imported on first use,
so ``import simulator`` (and with it the ``servesim`` command) loads nothing else.
"""
__all__ = ["run"]


def __getattr__(name: str):
    if name == "run":
        from simulator.api import run
        return run
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
