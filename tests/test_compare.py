"""`servesim compare`: a capacity table with 95% intervals per scheduler of each file, capacity.csv
and plots; the files' sweeps drawn together; one-line errors for unusable input."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from click.testing import CliRunner

from tests.test_sweep import tiny, write

from simulator.cli import EXIT_USER_ERROR, main
from simulator.commands.compare import curves_together, shared_load_key


def two_files(tmp_path: Path, **changes) -> list[Path]:
    varied = tiny(name="varied", metrics={"goodput": {"ttft_ms": 3000.0}}, **changes)
    equal = tiny(name="equal", metrics={"goodput": {"ttft_ms": 3000.0}}, **changes)
    equal["workload"]["output_len"] = {"kind": "fixed", "value": 32}
    return [write(tmp_path, varied, "varied.yaml"), write(tmp_path, equal, "equal.yaml")]


def invoke(*args: str):
    return CliRunner().invoke(main, ["compare", *args, "--workers", "1", "--tol", "0.2"])


def test_compare_prints_capacity_with_intervals_and_writes_csv_and_plot(tmp_path):
    files = two_files(tmp_path)
    result = invoke(*map(str, files), "-o", str(tmp_path / "out"), "--seeds", "2", "--no-sweeps")
    assert result.exit_code == 0, result.output
    assert "capacity of 2 schedulers x 2 seeds under p99_ttft_ms <= 3000" in result.output
    table = result.output[result.output.index("scenario  "):].splitlines()
    assert table[0].split() == ["scenario", "scheduler", "capacity", "(req/s)", "95%", "interval",
                                "seeds", "per", "seed", "offered", "->", "achieved", "(req/s)",
                                "not", "steady"]
    assert [line.split()[:2] for line in table[2:6]] == [["varied", "static"], ["varied", "orca"],
                                                         ["equal", "static"], ["equal", "orca"]]
    assert all(line.split()[3] == "±" and line.split()[5] == "2" for line in table[2:6])
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "capacity.csv").read_text())))
    assert len(rows) == 2 * 2 * 2
    assert {(r["scenario"], r["scheduler"], r["seed"]) for r in rows} == {
        (f, s, str(seed)) for f in ("varied", "equal") for s in ("static", "orca") for seed in (0, 1)}
    for name in ("capacity.png", "capacity.svg"):
        assert (tmp_path / "out" / name).stat().st_size > 0


def test_compare_sweeps_each_file_and_draws_all_curves_together(tmp_path):
    files = two_files(tmp_path, sweep={"workload.arrival.rate": [2.0, 8.0]}, num_seeds=1)
    result = invoke(*map(str, files), "-o", str(tmp_path / "out"), "--no-plots")
    assert result.exit_code == 0, result.output
    folders = [("varied", tmp_path / "out" / "varied"), ("equal", tmp_path / "out" / "equal")]
    assert all((folder / "sweep.csv").is_file() for _, folder in folders)
    curves, slos = curves_together(folders)
    assert [c.label for c in curves] == ["varied: static", "varied: orca", "equal: static", "equal: orca"]
    assert all(c.x == [2.0, 8.0] for c in curves) and slos == {"ttft": 3000.0}
    # Both swept the request rate: the figure's points are labelled as rates.
    assert shared_load_key(folders) == "workload.arrival.rate"


def test_compare_without_any_slo_is_a_one_line_error(tmp_path):
    path = write(tmp_path, tiny())
    result = invoke(str(path), "-o", str(tmp_path / "out"))
    assert result.exit_code == EXIT_USER_ERROR
    assert result.stderr.strip() == (f"error: {path}: no SLO to meet; pass --slo p99_ttft_ms=1000 "
                                     f"or set metrics.goodput in the file")


def test_compare_refuses_bad_slos_and_files_with_one_name(tmp_path):
    path = write(tmp_path, tiny())
    bad = invoke(str(path), "--slo", "p99_ttft=5")
    assert bad.exit_code == EXIT_USER_ERROR and "--slo: 'p99_ttft=5' must look like" in bad.stderr
    twice = invoke(str(path), str(write(tmp_path, tiny(), "copy.yaml")), "--slo", "p99_ttft_ms=5")
    assert twice.exit_code == EXIT_USER_ERROR and "name 'tiny' is also the name of" in twice.stderr
