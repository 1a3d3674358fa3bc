"""Results: the tables a run fills (requests, steps), its summary, the files, and reading them
back (``load``)."""
from simulator.results.load import RunResults, load

__all__ = ["RunResults", "load"]
