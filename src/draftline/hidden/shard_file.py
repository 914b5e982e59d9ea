"""One hidden-state shard, written front to back as it is computed.

The layout is known before the first batch (the plan fixes each shard's rows), so the
safetensors header is written first and the tensors follow in file order:

    input_ids [T] int32 | loss_mask [T] uint8 | states [T, C] bf16 or F8_E4M3
    | state_scales [T, G] float32 (FP8 only) | topk_ids [T, k] int32 | topk_logprobs [T, k] bf16

input_ids and loss_mask come from the tokens file; `states` arrives one batch at a time
(quantized here when FP8, state_dtype.py, in a third thread: the next batch's forward
does not wait for it); the scales (1/1280 of FP8 states at 27B width)
and the top-k teacher (about 1/300 of `states`) are held until the end. The header names
the states' dtype, so a reader never guesses the format. Every byte is written
once, in order, so the xxh3-128 hash the manifest records is computed on the way out and
there is never a second copy of a shard in memory. Two background threads hash and write
while the next batch is computed.

The result is a plain safetensors file: `safe_open(...).get_slice("states")[a:b]` reads
rows without reading the rest.
"""

from __future__ import annotations

import json
import os
import queue
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch
import xxhash

from ..io import temp_beside
from .plan import Record
from .state_dtype import STATE_DTYPES, quantize

WRITE_BYTES = 32 << 20
DTYPES = {torch.bfloat16: "BF16", torch.float8_e4m3fn: "F8_E4M3", torch.float32: "F32", torch.int32: "I32",
          torch.uint8: "U8"}


def layout(record: Record, tokens: int) -> list[tuple[str, torch.dtype, list[int]]]:
    out = [("input_ids", torch.int32, [tokens]), ("loss_mask", torch.uint8, [tokens]),
           ("states", STATE_DTYPES[record.state_dtype], [tokens, record.state_columns])]
    if record.scale_columns:
        out.append(("state_scales", torch.float32, [tokens, record.scale_columns]))
    if record.teacher == "top_k":
        out += [("topk_ids", torch.int32, [tokens, record.top_k]),
                ("topk_logprobs", torch.bfloat16, [tokens, record.top_k])]
    return out


def header(record: Record, tokens: int, metadata: dict[str, str]) -> bytes:
    entries, offset = {"__metadata__": metadata}, 0
    for name, dtype, shape in layout(record, tokens):
        n = dtype.itemsize
        for d in shape:
            n *= d
        entries[name] = {"dtype": DTYPES[dtype], "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text


def _bytes(t: torch.Tensor) -> memoryview:
    # Flat bytes: len() of a 2-D memoryview counts rows, not bytes.
    return memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy())


class ShardFileWriter:
    """with ShardFileWriter(path, record, input_ids, loss_mask, meta) as w: w.states(batch)...

    On success the temp file is fsynced and renamed to `path`; `digest` and `size` then
    describe the file. On any error the temp file is removed."""

    def __init__(self, path: Path, record: Record, input_ids: torch.Tensor, loss_mask: torch.Tensor,
                 metadata: dict[str, str], depth: int = 2):
        self.path, self.record = Path(path), record
        self.tokens = int(input_ids.shape[0])
        self.tmp = temp_beside(self.path)
        self._f = open(self.tmp, "wb")
        self._hash = xxhash.xxh3_128()
        self.size = 0
        self.rows_written = 0
        self._topk: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._scales: list[torch.Tensor] = []
        # FP8: batches quantized one after another, in order, beside the caller's thread.
        self._quantizer = ThreadPoolExecutor(1, thread_name_prefix="fp8") if record.scale_columns else None
        self._error: BaseException | None = None
        # Two threads, each with its own queue of the same buffers: the hash and the disk
        # run side by side instead of taking turns.
        self._queues = [queue.Queue(maxsize=depth), queue.Queue(maxsize=depth)]
        self._threads = [threading.Thread(target=self._drain, args=(q, work), daemon=True)
                         for q, work in zip(self._queues, (self._write, self._hash.update))]
        for t in self._threads:
            t.start()
        self._put(header(record, self.tokens, metadata))
        self._put(_bytes(input_ids.to(torch.int32)))
        self._put(_bytes(loss_mask.to(torch.uint8)))

    def _write(self, buf) -> None:
        # In slices: one 250 MB write() ran at a third of the rate of 32 MB ones here.
        for i in range(0, len(buf), WRITE_BYTES):
            self.size += self._f.write(buf[i : i + WRITE_BYTES])

    def _drain(self, q: queue.Queue, work) -> None:
        while (buf := q.get()) is not None:
            if self._error is None:
                try:
                    work(buf.result() if isinstance(buf, Future) else buf)
                except BaseException as e:  # noqa: BLE001 - reported on the caller's thread
                    self._error = e

    def _put(self, buf) -> None:
        if self._error is not None:
            raise self._error
        for q in self._queues:
            q.put(buf)

    def _stop(self) -> None:
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join()

    def states(self, rows: torch.Tensor, topk_ids: torch.Tensor | None = None,
               topk_logprobs: torch.Tensor | None = None) -> None:
        """The next rows of the shard, in order: [n, C] bf16 states (and their top-k teacher),
        stored as the record's state_dtype."""
        if rows.shape[-1] != self.record.state_columns or rows.dtype != torch.bfloat16:
            raise ValueError(f"extract: states of shape {tuple(rows.shape)} {rows.dtype}, expected "
                             f"[n, {self.record.state_columns}] bfloat16")
        self.rows_written += int(rows.shape[0])
        if self.rows_written > self.tokens:
            raise ValueError(f"extract: {self.rows_written} token rows for a shard of {self.tokens}")
        self._put(self._quantizer.submit(self._quantize, rows) if self._quantizer else _bytes(rows))
        if self.record.teacher == "top_k":
            self._topk.append((topk_ids.to(torch.int32), topk_logprobs.to(torch.bfloat16)))

    def _quantize(self, rows: torch.Tensor) -> memoryview:
        q, scales = quantize(rows, self.record.hidden)
        self._scales.append(scales.cpu())
        return _bytes(q)

    def _finish(self) -> None:
        if self.rows_written != self.tokens:
            raise ValueError(f"extract: {self.rows_written} token rows written for a shard of {self.tokens}")
        if self._quantizer:
            self._quantizer.shutdown()  # every batch quantized: its scales are all here, in order
            self._put(_bytes(torch.cat(self._scales)))
        if self.record.teacher == "top_k":
            self._put(_bytes(torch.cat([i for i, _ in self._topk])))
            self._put(_bytes(torch.cat([v for _, v in self._topk])))
        self._stop()
        if self._error is not None:
            raise self._error
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self.tmp, self.path)

    def __enter__(self) -> "ShardFileWriter":
        return self

    def __exit__(self, kind, err, tb) -> None:
        try:
            if kind is None:
                self._finish()
        finally:
            if any(t.is_alive() for t in self._threads):
                self._error = self._error or RuntimeError("aborted")
                self._stop()
            if self._quantizer:
                self._quantizer.shutdown(cancel_futures=True)
            if not self._f.closed:
                self._f.close()
            self.tmp.unlink(missing_ok=True)

    @property
    def digest(self) -> str:
        """xxh3-128 of the whole file, hex (what `xxhsum -H2` prints)."""
        return self._hash.hexdigest()
