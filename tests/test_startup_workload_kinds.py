"""simulator/workload/kinds: each workload option class is named by its kind and imported on use."""
from __future__ import annotations

import dataclasses

import pytest

from simulator.workload import FixedLength, PoissonArrivals, TraceArrivals, WorkloadSpec
from simulator.workload.kinds import ARRIVALS, JOINT_LENGTHS, LENGTHS, PRIORITY


def kind_default(cls: type) -> str:
    return next(f.default for f in dataclasses.fields(cls) if f.name == "kind")


@pytest.mark.parametrize("union", [ARRIVALS, LENGTHS], ids=["arrivals", "lengths"])
def test_every_tag_names_the_class_of_that_kind(union):
    for tag, path in union.members.items():
        cls = union.member(tag)
        assert f"{cls.__module__}:{cls.__qualname__}" == path
        assert kind_default(cls) == tag


def test_the_blocks_without_a_tag_name_their_classes():
    assert kind_default(JOINT_LENGTHS.resolve()) == "vllm_random"
    assert kind_default(PRIORITY.resolve()) == "choice"


def test_an_unknown_tag_has_no_member():
    assert ARRIVALS.member("poison") is None


def test_a_spec_built_in_code_refuses_a_value_of_the_wrong_kind():
    with pytest.raises(ValueError, match=r"^WorkloadSpec\.arrival: FixedLength\(kind='fixed', value=8\) "
                                         r"is not allowed; kind must be one of poisson, gamma, constant, "
                                         r"inf, trace$"):
        WorkloadSpec(arrival=FixedLength(8), prompt_len=FixedLength(8), output_len=FixedLength(8),
                     num_requests=1)
    with pytest.raises(ValueError, match=r"^WorkloadSpec\.output_len: PoissonArrivals\(.*\) is not "
                                         r"allowed; kind must be one of fixed, uniform, lognormal, "
                                         r"empirical$"):
        WorkloadSpec(arrival=PoissonArrivals(1.0), prompt_len=FixedLength(8),
                     output_len=PoissonArrivals(1.0), num_requests=1)


def test_a_trace_spec_is_told_by_its_kind():
    assert WorkloadSpec(arrival=TraceArrivals("t.csv")).is_trace
    assert not WorkloadSpec(arrival=PoissonArrivals(1.0), prompt_len=FixedLength(8),
                            output_len=FixedLength(8), num_requests=1).is_trace
