"""The production proxy's spool: every record reaches a local append-only file before the store.

A reply never waits for the store. Each record (a call, a judgement) is appended to ``spool.jsonl`` as
one JSON line and the file is fsync'd before the call is answered; records arriving together share one
write and one fsync. A :class:`SpoolWriter` copies what the file holds into the store in the background,
and keeps in ``spool.offset`` how far the store has it. A store that cannot be written (locked by
another process, a full disk) only delays the copy: the writer tries again, and a proxy started after a
crash or a stop copies from the saved offset on. Records are written to the store once: a record copied
twice (a crash between the store's commit and the offset's) is skipped by its id.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from campflow import progress

SPOOL_FILE = "spool.jsonl"
OFFSET_FILE = "spool.offset"


class Spool:
    """An append-only file of JSON lines with a committed offset beside it.

    Args:
        folder: where ``spool.jsonl`` and ``spool.offset`` live (created).
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / SPOOL_FILE
        self.offset_path = self.folder / OFFSET_FILE
        self._lock = threading.Lock()  # appends, reads and the truncation after a full copy
        self._pending: list[tuple[bytes, asyncio.Future]] = []
        self._appending: asyncio.Task | None = None
        self.appends = 0  # fsyncs so far (one per batch of records)

    async def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` (with whatever else is waiting) and return once it is on disk."""
        line = orjson.dumps(record, default=_default) + b"\n"
        future = asyncio.get_running_loop().create_future()
        self._pending.append((line, future))
        if self._appending is None or self._appending.done():
            self._appending = asyncio.create_task(self._drain())
        await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await asyncio.to_thread(self._write, b"".join(line for line, _ in batch))
            except Exception as exc:  # noqa: BLE001  (every waiting record hears about it)
                for _, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            for _, f in batch:
                if not f.done():
                    f.set_result(None)

    def _write(self, data: bytes) -> None:
        with self._lock, open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            self.appends += 1

    def committed(self) -> int:
        """Bytes of the spool the store already holds."""
        try:
            return int(self.offset_path.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def unwritten(self) -> tuple[list[dict[str, Any]], int]:
        """The records after the committed offset, and the offset after the last whole line."""
        with self._lock:
            start = self.committed()
            try:
                with open(self.path, "rb") as f:
                    f.seek(start)
                    data = f.read()
            except FileNotFoundError:
                return [], start
        end = data.rfind(b"\n") + 1  # a torn last line (a crash mid-append) waits for its end
        records = []
        for line in data[:end].splitlines():
            if line.strip():
                try:
                    records.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    progress.current().note(f"spool {self.path}: skipped a line that is not JSON")
        return records, start + end

    def commit(self, offset: int) -> None:
        """Mark the spool as in the store up to ``offset``; an entirely copied spool starts over empty."""
        with self._lock:
            size = self.path.stat().st_size if self.path.exists() else 0
            if offset >= size:
                with open(self.path, "wb") as f:
                    os.fsync(f.fileno())
                offset = 0
            _write_synced(self.offset_path, str(offset).encode())

    def pending_bytes(self) -> int:
        """Bytes not yet in the store."""
        size = self.path.stat().st_size if self.path.exists() else 0
        return max(size - self.committed(), 0)


class SpoolWriter:
    """Copies a spool into the store in the background, retrying while the store cannot be written.

    Args:
        spool: the spool.
        write: writes a batch of records to the store, skipping ids it holds already (raises on failure).
        interval_s: how often it looks for new records.
        max_backoff_s: the longest wait between tries while the store fails.
    """

    def __init__(
        self,
        spool: Spool,
        write: Callable[[Sequence[dict[str, Any]]], None],
        *,
        interval_s: float = 0.2,
        max_backoff_s: float = 5.0,
    ) -> None:
        self.spool, self.write = spool, write
        self.interval_s, self.max_backoff_s = interval_s, max_backoff_s
        self.failures = 0  # consecutive failed copies
        self.last_error: str | None = None
        self.copied = 0  # records copied by this writer
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._flushing = threading.Lock()

    def start(self) -> None:
        """Start copying (on the running loop)."""
        self._task = asyncio.create_task(self._run())

    def wake(self) -> None:
        """Copy soon (records were appended)."""
        self._wake.set()

    async def flush(self) -> bool:
        """Copy what the spool holds now; True if the store has all of it."""
        return await asyncio.to_thread(self._flush)

    def _flush(self) -> bool:
        # one copy at a time, held by the thread doing it: the background loop, a caller's flush and a copy
        # whose awaiting task was cancelled never read the same records nor commit offsets out of order
        with self._flushing:
            records, end = self.spool.unwritten()
            if not records and end == self.spool.committed():
                return True
            try:
                if records:
                    self.write(records)
            except Exception as exc:  # noqa: BLE001  (the store failing is waited out, never raised to a caller)
                self.failures += 1
                message = f"{type(exc).__name__}: {exc}"
                if message != self.last_error:
                    progress.current().note(
                        f"the store cannot be written yet ({message}); calls wait in {self.spool.path}"
                    )
                self.last_error = message
                return False
            self.spool.commit(end)
            self.copied += len(records)
            self.failures, self.last_error = 0, None
            return True

    async def _run(self) -> None:
        while True:
            done = await self.flush()
            wait = self.interval_s if done else min(self.interval_s * 2**self.failures, self.max_backoff_s)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass

    async def aclose(self, *, final_flush: bool = True) -> None:
        """Stop; with ``final_flush``, try once more to copy what is left (it stays spooled if that fails)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if final_flush:
            await self.flush()


def _write_synced(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
