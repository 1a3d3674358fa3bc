"""`servesim report DIR`: one self-contained HTML page (its data, style and scripts inline; no
network needed to open it), written atomically.

The page's data is one JSON object in ``<script type="application/json" id="servesim-data">``,
so a test (or any tool) can read exactly what the page shows; the scripts beside it only draw.
No timestamp or path outside DIR's name goes into the page: the same DIR gives the same bytes.
"""
from __future__ import annotations

import html
from importlib import resources
from pathlib import Path

from simulator.report.data import dumps, report_data
from simulator.report.toy import toy_data
from simulator.results.atomic import atomic_write

REPORT_HTML = "report.html"
DATA_ID = "servesim-data"
SCRIPTS = ("report.js", "toy.js")   # in this order: toy.js uses report.js's helpers

CSS = """
:root { --ink: #222; --muted: #666; --rule: #ddd; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
       margin: 0 auto; padding: 12px 20px 40px; max-width: 1400px; }
h1 { font-size: 22px; margin: 6px 0 2px; }
h2 { font-size: 18px; margin: 26px 0 4px; border-bottom: 1px solid var(--rule); padding-bottom: 3px; }
.intro, .sub { color: var(--muted); margin: 2px 0 8px; max-width: 1100px; }
table.summary { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
table.summary th, table.summary td { padding: 3px 9px; border-bottom: 1px solid var(--rule); text-align: right; }
table.summary th:first-child { text-align: left; }
table.summary thead th { font-weight: 600; background: #f6f6f6; }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 10px 18px; }
figure.chart { margin: 0; }
figure.chart figcaption { font-weight: 600; margin: 4px 0 0 4px; }
svg.plot { width: 100%; height: auto; display: block; font-size: 11px; }
svg .grid { stroke: #eee; } svg .frame { fill: none; stroke: #999; }
svg .label { fill: var(--muted); font-size: 12px; }
svg .line { fill: none; stroke-width: 1.6; }
svg .ci { stroke-width: 1.2; opacity: 0.4; }
svg .point-label { font-size: 10px; }
svg .hit { fill: transparent; }
svg .mark { fill: none; stroke-width: 2; }
svg .cursor { stroke: #333; stroke-dasharray: 3 3; }
svg .slo { stroke: crimson; stroke-dasharray: 5 4; } svg .slo-label { fill: crimson; font-size: 10px; }
svg .rid { fill: #1a1a1a; font-size: 10px; font-weight: 600; pointer-events: none; }
svg.plot rect { shape-rendering: crispEdges; }
.legend { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; margin: 6px 0; }
.legend .item { border: 1px solid var(--rule); background: #fff; border-radius: 4px; padding: 2px 8px;
                cursor: pointer; font: inherit; display: inline-flex; align-items: center; gap: 5px; }
.legend .item.off { opacity: 0.35; text-decoration: line-through; }
.legend .hint { color: var(--muted); font-size: 12px; margin-left: 8px; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; }
.controls { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin: 8px 0; }
.controls button { font: inherit; padding: 3px 10px; cursor: pointer; }
.controls button.toggle.on { background: #222; color: #fff; }
.controls input[type=range] { width: 320px; }
.clock { font-variant-numeric: tabular-nums; min-width: 130px; }
.stats { margin: 2px 0 0 4px; font-weight: 600; } .live { margin: 0 0 0 4px; color: var(--muted); }
.kinds { display: flex; gap: 6px; align-items: center; color: var(--muted); }
.kinds .swatch { margin-left: 10px; }
.k-prefill { background: hsl(210, 60%, 38%); } .k-decode { background: hsl(210, 60%, 66%); }
.k-stalled, svg rect.k-stalled { background: khaki; fill: khaki; }
.k-preempted { background: crimson; } .k-preempted-x { fill: crimson; font-weight: 700; }
.tip { position: fixed; pointer-events: none; background: rgba(255, 255, 255, 0.96); border: 1px solid #999;
       border-radius: 4px; padding: 4px 7px; font-size: 12px; white-space: pre; z-index: 10;
       box-shadow: 0 1px 4px rgba(0, 0, 0, 0.2); }
"""


def page_data(result_dir: Path) -> dict:
    """What the page embeds: the folder's data (ValueError when it has none) and the toy."""
    data = report_data(result_dir)
    data["toy"] = toy_data()
    return data


def render_page(data: dict) -> str:
    title = html.escape(f"servesim report: {data['title']}")
    scripts = "\n".join(f"<script>\n{_script(name)}</script>" for name in SCRIPTS)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{title}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"<h1>{title}</h1>\n<p class=\"sub\">Written by <code>servesim report</code> from the "
        "folder's result files. Hover a chart for values; click a legend name to hide it.</p>\n"
        "<main id=\"app\"><noscript>The charts of this page are drawn by JavaScript; its data "
        f"is in the {DATA_ID} element.</noscript></main>\n<div id=\"tip\" class=\"tip\" hidden></div>\n"
        f"<script type=\"application/json\" id=\"{DATA_ID}\">{dumps(data)}</script>\n"
        f"{scripts}\n</body>\n</html>\n")


def _script(name: str) -> str:
    text = resources.files("simulator.report").joinpath(name).read_text(encoding="utf-8")
    if "</script" in text.lower():   # it would end the element early: the scripts must not say it
        raise RuntimeError(f"simulator/report/{name} contains </script")
    return text


def write_report(result_dir: Path, out_file: Path | None = None) -> Path:
    """Write DIR's page to ``out_file`` (default DIR/report.html), whole or not at all."""
    result_dir = Path(result_dir)
    page = render_page(page_data(result_dir))
    out_file = Path(out_file) if out_file is not None else result_dir / REPORT_HTML
    out_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out_file, lambda f: f.write(page))
    return out_file
