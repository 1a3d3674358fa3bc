"""steps.csv written by a forked helper while the run goes on, a table streamed alongside it, and
the table's rest shared at the end.

The simulation uses one core. A helper forked before it starts receives each chunk of the step
log as the log stores it (8,192 rows, 4,096 in a short run; raw array bytes over a pipe) and
appends its text to steps.csv, so that file is all but done when the run ends. A table whose rows become known during
the run (requests.csv: the requests finished so far, in id order) is streamed at the same ticks:
after each chunk the parent sends the table's next rows, and the helper appends their text to the
table's temp file. At the end the parent sends the table's rest (all of it, if nothing was
streamed); both processes format its pieces, the helper from the first piece on, straight into
the file, the parent from the last piece back, kept in memory, until they meet (``PieceDealer``).
The parent appends its pieces once the helper is done: the file is assembled in row order, never
copied.

Text is ``csv_format``'s, piece by piece: a table written in parts is byte for byte the whole.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Sequence, TextIO

import numpy as np

from simulator.atomic_files import atomic_write, commit, open_text, temp_file
from simulator.csv_format import csv_row_chunks
from simulator.metrics.step_log import STEP_COLUMNS, StepLog
from simulator.parallel_write import Helper, Inbox, PieceDealer

STEPS_CSV = "steps.csv"


class ForkedWriter:
    """A helper writing ``staging``'s steps.csv from ``step_log`` (what it holds now, then each
    chunk it stores until ``end_steps``), appending a ``stream_table``'s rows as they come and
    sharing the rest of the table (``start_table``, then ``finish_table``). ``close`` ends the
    helper, on any path; after ``finish_table`` it has nothing left to do."""

    def __init__(self, staging: Path, step_log: StepLog):
        self._staging, self._step_log = staging, step_log
        self._dealer = PieceDealer()
        self._table: tuple[str, Path, tuple] | None = None   # streamed: name, temp file, header
        self._next_rows: Callable[[], Sequence | None] | None = None
        self._shared: tuple[str, Path, list] | None = None   # start_table's name, file, pieces
        step_log.flush()   # the helper's copy of the log holds every row logged so far
        try:
            self._helper = Helper(lambda inbox: _helper_job(inbox, staging, step_log, self._dealer))
        except BaseException:
            self._dealer.close()
            raise
        step_log.stream_to(self._send_chunk)

    def stream_table(self, name: str, header: Sequence[str],
                     next_rows: Callable[[], Sequence | None]) -> None:
        """Stream ``staging/name``'s first rows: after each chunk of the log, ``next_rows()``
        gives the table's next rows (their columns; None: none yet), appended by the helper.
        ``start_table`` and ``finish_table`` write the rest."""
        self._table = (name, temp_file(self._staging / name), tuple(header))
        self._next_rows = next_rows

    def end_steps(self) -> None:
        """The log is complete: the helper finishes steps.csv (a streamed table stops)."""
        self._step_log.flush()
        self._step_log.stream_to(None)
        self._next_rows = None
        self._helper.send(None)

    def start_table(self, name: str, header: Sequence[str], num_rows: int,
                    read_rows: Callable[[int, int], Sequence[Sequence]]) -> None:
        """Hand ``staging/name``'s rest (after the rows streamed) to the helper, which formats
        pieces from the front once steps.csv is done, while the parent goes on (the run's
        summary) until ``finish_table``. ``num_rows``: the rows left; ``read_rows(start,
        stop)``: those rows' columns, counted from the first row left. Each piece goes to the
        helper as soon as it is read, so the helper starts on the first while the rest are
        read."""
        streamed = self._table is not None and self._table[0] == name
        tmp = self._table[1] if streamed else temp_file(self._staging / name)
        self._helper.send((tmp, tuple(header)))
        rows = piece_rows(num_rows)
        starts = range(0, num_rows, rows)
        self._dealer.deal(len(starts))
        pieces = []
        for start in starts:
            pieces.append(read_rows(start, min(start + rows, num_rows)))
            self._helper.send(pieces[-1], spill=True)
        self._shared = (name, tmp, pieces)

    def finish_table(self) -> None:
        """Format the pieces the helper has not taken, from the back, wait for the helper to
        end and put the table in the staging folder."""
        name, tmp, pieces = self._shared
        texts = []
        while (piece := self._dealer.take_back(self._helper.status_fd)) is not None:
            texts.append(_table_text(pieces[piece]))
        self._helper.wait()   # the helper's error, if any, is raised here
        with open_text(tmp, "a") as f:
            f.writelines(reversed(texts))
        commit(tmp, self._staging / name)

    def close(self) -> None:
        self._step_log.stream_to(None)
        self._helper.kill()
        self._dealer.close()

    def _send_chunk(self, chunk: dict[str, np.ndarray]) -> None:
        self._helper.send([chunk[name] for name in STEP_COLUMNS])
        if self._next_rows is not None and (rows := self._next_rows()) is not None:
            self._helper.send((*self._table[1:], rows))


def _helper_job(inbox: Inbox, staging: Path, step_log: StepLog, dealer: PieceDealer) -> None:
    tables = _OpenTables()
    try:
        atomic_write(staging / STEPS_CSV, lambda f: _write_steps(f, inbox, step_log, tables))
        f = tables.file(*inbox.receive())   # the table to share: streamed so far, or new
        # Front pieces come in order (0, 1, 2, ...), as the parent sends them.
        while dealer.take_front() is not None:
            f.write(_table_text(inbox.receive()))
    finally:
        tables.close()


class _OpenTables:
    """The helper's open table files, by temp path; each opened with its header line."""

    def __init__(self) -> None:
        self._files: dict[Path, TextIO] = {}

    def file(self, tmp: Path, header: tuple) -> TextIO:
        if tmp not in self._files:
            self._files[tmp] = open_text(tmp, "w")
            self._files[tmp].write(",".join(header) + "\n")
        return self._files[tmp]

    def close(self) -> None:
        for f in self._files.values():
            f.close()


def _write_steps(f: TextIO, inbox: Inbox, step_log: StepLog, tables: _OpenTables) -> None:
    """steps.csv: the rows the log held when the helper was forked, then each chunk received;
    a streamed table's rows (tmp, header, columns) come between the chunks."""
    f.write(",".join(STEP_COLUMNS) + "\n")
    if len(step_log):
        logged = step_log.to_columns()
        f.writelines(_steps_text([logged[name] for name in STEP_COLUMNS]))
    while (message := inbox.receive()) is not None:
        if isinstance(message, tuple):
            tmp, header, rows = message
            tables.file(tmp, header).write(_table_text(rows))
        else:
            f.writelines(_steps_text(message))


def _steps_text(columns: Sequence[np.ndarray]) -> Iterator[str]:
    """Step rows as text, each chunk as it comes (formatting two chunks together saves nothing
    measurable), the rows held at the fork in pieces of 16,384 (the memory their text takes)."""
    return csv_row_chunks(columns, 16384)


def piece_rows(num_rows: int) -> int:
    """Rows per piece of a shared table: a 64th of it, within 1,024 to 16,384 rows; but a
    table under 4,096 rows is cut in quarters of at least 256 rows. The two processes end at
    most a piece apart; a piece costs ~0.8 ms of its own (its table of texts), so pieces under
    1,024 rows pay only where a table would otherwise not be shared at all (1,000 requests'
    rows: 9.5 ms in one piece, 11.8 ms in four, of which each process formats about half)."""
    return min(max(-(-num_rows // 64), min(1024, max(-(-num_rows // 4), 256))), 16384)


def _table_text(columns: Sequence[Sequence]) -> str:
    return "".join(csv_row_chunks(columns))
