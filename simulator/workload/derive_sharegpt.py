"""Derive the packaged ShareGPT length table (data/sharegpt_lengths.csv) from the shared workload.

    python -m simulator.workload.derive_sharegpt [SOURCE.jsonl] [-o OUT.csv]

SOURCE defaults to ``../shared/reference/llmservingsim/workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl``
(LLMServingSim's 300 ShareGPT requests; data/README.md names it). Only each request's
``input_toks`` and ``output_toks`` are kept, as (prompt_len, output_len) rows sorted by prompt then
output: arrival times and token ids are dropped, and sorting makes the table independent of the
order the requests arrived in. The shared file is not committed; the table is, and
tests/test_workload_lengths.py re-derives it and compares the bytes.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from simulator.workload.sharegpt import COLUMNS, TABLE_PATH

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = (REPO / ".." / "shared" / "reference" / "llmservingsim" / "workloads"
                  / "sharegpt-llama-3.1-8b-300-sps10.jsonl")
SOURCE_FIELDS = ("input_toks", "output_toks")   # the source's names for COLUMNS, in order


def read_pairs(source: Path) -> list[tuple[int, int]]:
    """(prompt_len, output_len) of every request in the JSONL file, in file order."""
    pairs = []
    with open(source, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            pair = tuple(row.get(name) for name in SOURCE_FIELDS)
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair):
                raise ValueError(f"{source}:{number}: {SOURCE_FIELDS} must be integers >= 1, got {pair}")
            pairs.append(pair)
    if not pairs:
        raise ValueError(f"{source}: no requests")
    return pairs


def table_text(pairs: list[tuple[int, int]]) -> str:
    """The table's bytes: a header, then one sorted row per request ("\\n" line ends)."""
    rows = [f"{prompt},{output}\n" for prompt, output in sorted(pairs)]
    return ",".join(COLUMNS) + "\n" + "".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("-o", "--output", type=Path, default=TABLE_PATH)
    args = parser.parse_args(argv)
    pairs = read_pairs(args.source)
    args.output.write_bytes(table_text(pairs).encode("ascii"))
    print(f"{len(pairs)} requests from {args.source} -> {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
