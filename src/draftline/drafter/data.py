"""Where the training loop gets its sequences: all in memory, or streamed from the shards.

`train.loader: memory` reads every row once, states as float32: fine for the embedded
default's few hundred MB, impossible for a 27B target's terabytes. `stream` keeps only the
index (ids and lengths) and reads each step's rows from the memory-mapped shards, in their
stored bf16, `train.prefetch` steps ahead on a background thread while the current step
computes; memory is then prefetch x batch, whatever the dataset's size. Each process reads
only its own micro-batches. The states reach the device in bf16 and are widened there
(train_step.py), so both loaders give the same numbers on the device and the same
training, bit for bit.
"""

from __future__ import annotations

import queue
import threading
from functools import lru_cache
from pathlib import Path

from ..hidden.reader import ShardRows, load_sequences
from ..hidden.store import Sequence
from .batching import epoch_batches, micro_batches


class InMemory:
    """A list of loaded sequences, with the same face as ShardRows."""

    def __init__(self, seqs: list[Sequence]):
        self.seqs = seqs
        self.ids = [s.id for s in seqs]
        self.lengths = [int(s.input_ids.shape[0]) for s in seqs]

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i):
        return self.seqs[i]

    def read(self, indices: list[int]) -> list[Sequence]:
        return [self.seqs[i] for i in indices]

    def token_ids(self):
        return ((s.id, s.input_ids) for s in self.seqs)

    def close(self) -> None:
        pass


def open_rows(hidden: Path, split: str, loader: str):
    return ShardRows(hidden, split) if loader == "stream" else InMemory(load_sequences(hidden, split))


class BatchOrder:
    """This process's micro-batches (row indices) of every optimizer step: a pure function of
    (seed, epoch, step), see batching.py, so a resumed run reads what an uninterrupted one did."""

    def __init__(self, lengths: list[int], ids: list[str], batch_size: int, seed: int, per_epoch: int,
                 rank: int, world: int, accum: int):
        self.per_epoch, self.rank, self.world, self.accum = per_epoch, rank, world, accum
        self._epoch = lru_cache(maxsize=2)(lambda e: epoch_batches(lengths, ids, batch_size, seed, e))

    def micro(self, step: int) -> list[list[int]]:
        epoch, index = divmod(step, self.per_epoch)
        return micro_batches(self._epoch(epoch)[index], self.rank, self.world, self.accum)


class Prefetch:
    """for step in range(start, stop): fetch.get(step) -> that step's micro-batches, as row
    indices and as Sequences, read `depth` steps ahead by one thread (depth 0: read when
    asked)."""

    def __init__(self, rows, order: BatchOrder, start: int, stop: int, depth: int):
        self.rows, self.order, self.depth = rows, order, depth
        self._q: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._thread = None
        if depth > 0:
            self._thread = threading.Thread(target=self._run, args=(start, stop), daemon=True)
            self._thread.start()

    def _read(self, step: int) -> tuple[list[list[int]], list[list[Sequence]]]:
        micro = self.order.micro(step)
        return micro, [self.rows.read(m) for m in micro]

    def _run(self, start: int, stop: int) -> None:
        for step in range(start, stop):
            try:
                item = (step, self._read(step), None)
            except BaseException as e:  # noqa: BLE001 - raised again on the training thread
                item = (step, None, e)
            while not self._stop.is_set():
                try:
                    self._q.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if self._stop.is_set() or item[2] is not None:
                return

    def get(self, step: int) -> tuple[list[list[int]], list[list[Sequence]]]:
        if self._thread is None:
            return self._read(step)
        got, read, err = self._q.get()
        if err is not None:
            raise err
        if got != step:
            raise RuntimeError(f"train: prefetched step {got}, expected {step}")
        return read

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "Prefetch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
