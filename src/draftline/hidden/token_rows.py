"""The tokens file as extraction reads it: columnar, a row turned into Python objects only
when its shard is written. A list of dicts of 200M tokens would be ~10 GB of Python ints
in every rank; the Arrow columns are the file's own bytes."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

COLUMNS = ["id", "split", "input_ids", "loss_mask"]


class TokenRows:
    def __init__(self, table):
        self.table = table.select(COLUMNS).combine_chunks()
        self.lengths = pc.list_value_length(self.table["input_ids"]).to_numpy(zero_copy_only=False).tolist()

    @classmethod
    def read(cls, path: str | Path) -> "TokenRows":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: not found (run the stage that writes it first)")
        return cls(pq.read_table(path, columns=COLUMNS))

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, i: int) -> dict:
        return self.table.slice(i, 1).to_pylist()[0]
