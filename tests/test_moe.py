"""Experts a step touches (cost_models/moe.py): E (1 - (1 - k/E)^T), worked by hand, and the
measured expert table read at that count."""
import pytest

from cost_models.moe import ExpertTable, expected_distinct_experts


@pytest.mark.parametrize("tokens, expected", [
    (1, 8.0),                                   # one token: its top-8, all distinct
    (8, 128 * (1 - (120 / 128) ** 8)),          # 51.6199: fewer than 8 x 8 = 64, repeats likely
    (4096, 128 * (1 - (120 / 128) ** 4096)),    # every expert, to 1e-100
])
def test_expected_distinct_experts_of_128_top_8(tokens, expected):
    assert expected_distinct_experts(tokens, 128, 8) == pytest.approx(expected, rel=1e-12)


def test_hand_values():
    assert expected_distinct_experts(8, 128, 8) == pytest.approx(51.6199, abs=1e-4)   # 0.9375^8 = 0.596719
    assert expected_distinct_experts(4096, 128, 8) == 128.0
    assert expected_distinct_experts(0, 128, 8) == 0.0
    assert expected_distinct_experts(3, 8, 2) == pytest.approx(8 * (1 - 0.75 ** 3))   # Mixtral: 4.625


def _table():
    # Two token rows, times linear in the activated experts: 10 us + 1 us per expert.
    return ExpertTable([1, 4, 4], [2, 2, 8], [12e-6, 12e-6, 18e-6], num_experts=8, top_k=2)


def test_table_reads_its_rows_at_the_expected_experts():
    table = _table()
    assert table.time_s(1) == pytest.approx(12e-6)                          # 2 experts: the point
    four = expected_distinct_experts(4, 8, 2)                               # 8 (1 - 0.75^4) = 5.47
    assert table.time_s(4) == pytest.approx(10e-6 + four * 1e-6)
    assert table.time_s(8) == pytest.approx((10e-6 + expected_distinct_experts(8, 8, 2) * 1e-6) * 8 / 4)
    assert ExpertTable.from_json(table.to_json()).time_s(3) == table.time_s(3)


def test_the_shipped_moe_profile_prices_experts_at_the_expected_distinct_count():
    import dataclasses

    from cost_models.batch_shape import BatchShape
    from cost_models.profiles import load_cost_model, profile_path, read_model_file
    data = read_model_file(profile_path("rtx-pro-6000-qwen3-30b-a3b"))
    model = load_cost_model(data, 1, step_overhead_s=0.0)
    assert isinstance(model.moe, ExpertTable) and (model.moe.num_experts, model.moe.top_k) == (128, 8)
    assert model.moe.time_s(1) == pytest.approx(50.23e-6, rel=1e-3)    # moe.csv: 1 token, 8 experts
    shape = BatchShape.of([1] * 8, [100] * 8)
    without = dataclasses.replace(model, moe=None)
    assert model.step_time_s(shape) - without.step_time_s(shape) == pytest.approx(
        48 * model.moe.time_at(8, 128 * (1 - (120 / 128) ** 8)), rel=1e-9)
    with pytest.raises(ValueError, match="no expert timings at tp 2"):
        data["tensor_parallel"]["2"] = data["tensor_parallel"]["1"] | {"moe": None}
        load_cost_model(data, 2)
