"""One module per workload option class, imported only when a scenario names it: by its ``kind``
(arrivals, lengths) or by giving its block (``lengths:``, ``priority:``). Creating a dataclass costs
about a millisecond of start-up, and a run uses two or three of these classes.

Each entry names ``module:Class``; tests/test_startup_imports.py checks that every tag is its
class's own ``kind``.
"""
from cost_models.options import LazyClass, TaggedUnion

_HERE = "simulator.workload.kinds"
ARRIVALS = TaggedUnion("kind", {
    "poisson": f"{_HERE}.poisson:PoissonArrivals", "gamma": f"{_HERE}.gamma:GammaArrivals",
    "constant": f"{_HERE}.constant:ConstantArrivals", "inf": f"{_HERE}.inf:InfArrivals",
    "trace": f"{_HERE}.trace:TraceArrivals"})
LENGTHS = TaggedUnion("kind", {
    "fixed": f"{_HERE}.fixed:FixedLength", "uniform": f"{_HERE}.uniform:UniformLength",
    "lognormal": f"{_HERE}.lognormal:LognormalLength", "empirical": f"{_HERE}.empirical:EmpiricalLength"})
JOINT_LENGTHS = LazyClass(f"{_HERE}.vllm_random:VllmRandomLengths")
PRIORITY = LazyClass(f"{_HERE}.priority:PriorityChoice")
