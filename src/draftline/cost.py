"""What a stage run cost, for its metrics: wall time, rows per second and the process's
peak resident memory (Linux reports ru_maxrss in KiB)."""

from __future__ import annotations

import resource
import time


class Cost:
    def __init__(self):
        self.t0 = time.perf_counter()

    def report(self, rows: int) -> dict:
        seconds = time.perf_counter() - self.t0
        return {"seconds": round(seconds, 2), "rows_per_second": round(rows / max(seconds, 1e-9), 1),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
