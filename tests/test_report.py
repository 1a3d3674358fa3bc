"""`servesim report DIR`: one self-contained HTML page whose embedded JSON is exactly the result
files' data (summaries, latency CDFs, decimated engine series, sweep curves) and the toy's
simulated slot timelines, whose step counts are worked out here by hand for every slot count."""
from __future__ import annotations

import csv
import json
import math
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from simulator.cli import EXIT_USER_ERROR, main
from simulator.report import data as report_data
from simulator.report.page import DATA_ID, SCRIPTS
from simulator.report.toy import OUTPUT_LENGTHS, TOY_SCENARIO
from simulator.results.decimate import envelope
from simulator.sweep.stats import mean_ci95

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
# 120 requests of the example scenario: static and vLLM V1 take well over 1,000 steps each.
RUN_ARGS = [str(SCENARIOS / "static_vs_continuous.yaml"), "--set", "workload.num_requests=120",
            "--scheduler", "static", "--scheduler", "vllm_v1", "--no-plots"]
SWEEP_ARGS = [str(SCENARIOS / "static_vs_continuous_slots.yaml"), "--set", "workload.num_requests=20",
              "--set", "sweep={workload.arrival.rate: [2, 6]}", "--workers", "1", "--no-plots",
              "--no-progress"]


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


class _Page(HTMLParser):
    """The page's tags (with attributes) and the text of each script element, by id."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._in_script: dict | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append((self._in_script, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None

    def handle_data(self, data):
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def parse(path: Path) -> tuple[_Page, dict]:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    (text,) = [t for a, t in page.scripts if a.get("id") == DATA_ID]
    return page, json.loads(text)


@pytest.fixture(scope="module")
def run_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "example"
    assert cli("run", *RUN_ARGS, "-o", str(out)).exit_code == 0
    result = cli("report", str(out))
    assert result.exit_code == 0, result.output
    assert result.output == f"report: {out / 'report.html'}\n"
    return out, *parse(out / "report.html")


@pytest.fixture(scope="module")
def sweep_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "slots"
    assert cli("sweep", *SWEEP_ARGS, "-o", str(out)).exit_code == 0
    page = out / "page.html"
    assert cli("report", str(out), "-o", str(page)).exit_code == 0
    return out, *parse(page)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def floats(rows: list[dict], column: str) -> list[float]:
    return [float(r[column]) for r in rows if r[column] != ""]


def test_each_schedulers_summary_is_its_summary_json(run_report):
    out, _, data = run_report
    assert [r["label"] for r in data["runs"]] == ["static", "vllm_v1"]
    for run in data["runs"]:
        summary = json.loads((out / run["label"] / "summary.json").read_text())
        assert run["summary"] == {k: v for k, v in summary.items() if not isinstance(v, (list, dict))}
        assert run["summary"]["output_throughput"] == summary["output_throughput"]
    assert [key for key, _ in data["summary_columns"]][:3] == [
        "completed", "request_throughput", "output_throughput"]


def test_latency_cdfs_are_the_sorted_latencies_of_requests_csv(run_report):
    out, _, data = run_report
    for run in data["runs"]:
        rows = read_csv(out / run["label"] / "requests.csv")
        for column in ("ttft_ms", "tpot_ms", "e2el_ms"):
            values = sorted(v for v in floats(rows, column) if math.isfinite(v))
            cdf = run["cdfs"][column]
            assert cdf["x"] == values, (run["label"], column)
            assert cdf["y"] == [(i + 1) / len(values) for i in range(len(values))]
        assert len(run["cdfs"]["ttft_ms"]["x"]) == 120


def test_engine_series_are_the_steps_decimated_to_a_bounded_size(run_report):
    out, _, data = run_report
    for run in data["runs"]:
        steps = read_csv(out / run["label"] / "steps.csv")
        assert len(steps) > report_data.SERIES_POINTS   # so the page really was decimated
        end_s = np.array(floats(steps, "end_s"))
        for column in ("num_running", "num_waiting", "kv_usage"):
            t, y = envelope(end_s, np.array(floats(steps, column)), report_data.SERIES_POINTS)
            [series] = run["series"][column]   # one replica: one line
            assert series["name"] == ""
            assert (series["t"], series["y"]) == (t.tolist(), y.tolist()), (run["label"], column)
            assert len(series["t"]) <= report_data.SERIES_POINTS
            assert (series["t"][0], series["t"][-1]) == (end_s[0], end_s[-1])
            assert max(series["y"]) == max(floats(steps, column))   # every peak still shows


def test_page_is_self_contained(run_report):
    out, page, _ = run_report
    text = (out / "report.html").read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text
    assert not [tag for tag, attrs in page.tags if {"src", "href"} & set(attrs) or tag == "link"]
    inline = [t for a, t in page.scripts if not a]
    js = [(ROOT / "simulator" / "report" / name).read_text(encoding="utf-8") for name in SCRIPTS]
    assert [t.strip() for t in inline] == [s.strip() for s in js]


def test_same_folder_gives_the_same_bytes(run_report, tmp_path):
    out, _, _ = run_report
    again = tmp_path / "again.html"
    assert cli("report", str(out), "-o", str(again)).exit_code == 0
    assert again.read_bytes() == (out / "report.html").read_bytes()


def _static_steps(outputs: list[int], slots: int) -> int:
    """Static: consecutive batches of ``slots``, each as long as its longest output."""
    return sum(max(outputs[i:i + slots]) for i in range(0, len(outputs), slots))


def _continuous_steps(outputs: list[int], slots: int) -> int:
    """Continuous: greedy list scheduling in arrival order (a slot refills when it frees)."""
    free_at = [0] * slots
    for steps in outputs:
        free_at[free_at.index(min(free_at))] += steps
    return max(free_at)


@lru_cache(maxsize=None)
def _toy_yaml(name: str) -> dict:
    return yaml.safe_load((SCENARIOS / name).read_text())


def test_toy_is_the_toy_scenario_file():
    raw = _toy_yaml("toy_unit.yaml")
    assert {k: v for k, v in raw.items() if k not in ("description", "schedulers")} == TOY_SCENARIO
    assert OUTPUT_LENGTHS["equal"] == _toy_yaml("toy_unit_equal.yaml")["workload"]["output_len"]
    assert [s["preset"] for s in raw["schedulers"]] == ["static", "orca"]


def test_toy_timelines_finish_when_the_hand_rules_say(sweep_report):
    _, _, data = sweep_report
    toy = data["toy"]
    col = {name: i for i, name in enumerate(toy["columns"])}
    assert [(c["slots"], c["lengths"]) for c in toy["cases"]] == [
        (k, lengths) for k in range(1, 9) for lengths in ("equal", "varied")]
    for case in toy["cases"]:
        outputs, k = case["output_lens"], case["slots"]
        assert outputs == ([16] * 16 if case["lengths"] == "equal" else
                           [28, 21, 17, 9, 10, 2, 3, 1, 6, 27, 21, 30, 17, 20, 32, 24])
        expected = {"static": _static_steps(outputs, k), "continuous": _continuous_steps(outputs, k)}
        for role, steps in expected.items():
            lane, where = case[role], (k, case["lengths"], role)
            assert (lane["finish_s"], lane["num_steps"]) == (float(steps), steps), where
            assert lane["output_throughput"] == sum(outputs) / steps, where
            assert max(r[col["end_s"]] for r in lane["rows"]) == lane["finish_s"], where
            per_request = np.bincount([r[col["request_id"]] for r in lane["rows"]], minlength=16)
            assert per_request.tolist() == outputs, where   # a row per step: prefill + decodes
            assert {r[col["lane"]] for r in lane["rows"]} == set(range(min(k, 16))), where
        if case["lengths"] == "varied":
            assert case["static"]["finish_s"] >= case["continuous"]["finish_s"]
    four = {c["lengths"]: c for c in toy["cases"] if c["slots"] == 4}
    assert [four["varied"][r]["finish_s"] for r in ("static", "continuous")] == [100.0, 77.0]
    assert [four["equal"][r]["finish_s"] for r in ("static", "continuous")] == [64.0, 64.0]


def test_sweep_gives_curves_with_rate_labels(sweep_report):
    out, _, data = sweep_report
    sweep = data["sweep"]
    assert data["runs"] == [] and sweep["load_key"] == "workload.arrival.rate"
    assert [c["label"] for c in sweep["curves"]] == ["static", "orca"]
    rows = read_csv(out / "sweep.csv")
    for curve in sweep["curves"]:
        assert curve["labels"] == ["rate=2", "rate=6"] and curve["load"] == [2.0, 6.0]
        for metric in ("output_throughput", "p99_ttft_ms", "median_tpot_ms"):
            for i, rate in enumerate(("2", "6")):
                cells = [float(r[metric]) for r in rows
                         if r["scheduler"] == curve["label"] and r["workload.arrival.rate"] == rate]
                assert len(cells) == 2   # two seeds
                assert curve["metrics"][metric]["mean"][i] == math.fsum(cells) / 2
                assert curve["metrics"][metric]["ci"][i] == mean_ci95(cells).half_width
    assert {p["metric"]: p["slo_ms"] for p in sweep["panels"]}["p99_ttft_ms"] == 3000.0
    assert not (out / "report.html").exists()   # -o chose the file


def test_missing_or_empty_folder_is_one_line_and_exit_2(tmp_path):
    for folder, why in ((tmp_path / "nope", "no such result folder"),
                        (tmp_path, "nothing to report")):
        result = cli("report", str(folder))
        assert result.exit_code == EXIT_USER_ERROR
        assert result.stderr.startswith(f"error: {folder}: {why}")
        assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_parquet_run_folder_reports_like_csv(tmp_path):
    toy = tmp_path / "toy"
    args = ["run", str(SCENARIOS / "toy_unit.yaml"), "-o", str(toy), "--no-plots"]
    assert cli(*args, "--format", "parquet").exit_code == 0
    data = report_data.report_data(toy)
    import pandas as pd
    requests = pd.read_parquet(toy / "orca" / "requests.parquet")
    assert [r["label"] for r in data["runs"]] == ["orca", "static"]
    assert data["runs"][0]["cdfs"]["e2el_ms"]["x"] == sorted(requests["e2el_ms"].tolist())


def test_a_run_of_several_replicas_draws_a_line_per_replica(tmp_path):
    # Three replicas: each engine series is three lines, each replica's own steps decimated,
    # named as the PNG plots name them (summary.json's replicas).
    out = tmp_path / "routed"
    assert cli("run", str(SCENARIOS / "toy_unit.yaml"), "--set", "engine.num_replicas=3",
               "--scheduler", "orca", "-o", str(out), "--no-plots").exit_code == 0
    [run] = report_data.report_data(out)["runs"]
    steps = read_csv(out / "orca" / "steps.csv")
    for column in ("num_running", "num_waiting", "kv_usage"):
        lines = run["series"][column]
        assert [line["name"] for line in lines] == ["replica 0", "replica 1", "replica 2"]
        for index, line in enumerate(lines):
            mine = [row for row in steps if int(row["replica"]) == index]
            t, y = envelope(np.array(floats(mine, "end_s")), np.array(floats(mine, column)),
                            report_data.SERIES_POINTS)
            assert (line["t"], line["y"]) == (t.tolist(), y.tolist())
