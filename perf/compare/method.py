"""The measuring method of perf/compare, kept apart so every table is made the same way.

A timing taken while something else runs is not a measurement: on 2 cores one stray process
moves a peer's time several-fold (the published table's Open MPI went from 140 to 662 us at
1 MiB under the harness's own load). So:
- systems run one at a time, interleaved size by size, and the sweep repeats in rounds;
- before each size of each round the harness runs nothing for a moment and samples how many
  cores something else keeps busy (/proc/stat), which the load average cannot say (it lags by
  a minute and counts the harness's own ranks);
- a figure is the best of its clean rounds, and beside each ratio stands its spread: the
  ratios of the same round's runs, lowest to highest.
"""
import os
import time

BUSY_SAMPLE_S = 0.25
# More than this many cores busy while the harness runs nothing: the sample is loaded.
BUSY_LIMIT = 0.2


def _cpu_times():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]  # all, idle + iowait


def others_busy(seconds=BUSY_SAMPLE_S):
    """Cores kept busy by everything else while this process sleeps for `seconds`."""
    total0, idle0 = _cpu_times()
    time.sleep(seconds)
    total1, idle1 = _cpu_times()
    if total1 == total0:
        return 0.0
    return (1 - (idle1 - idle0) / (total1 - total0)) * (os.cpu_count() or 1)


# A run lasts at most about this long. Without it, a system that takes ms per small call on
# oversubscribed cores (MPICH and gloo at 4 ranks: 4-5 ms per 8 B call) spent 20-30 s on each
# small size, half of a full sweep (docs/performance.md, the method).
RUN_BUDGET_S = 1.0


def iterations(nbytes, world, us_per_call=None):
    """Calls per run: about 256 MiB of output moved, 10 to 5000 calls (a few ms at 8 B, where
    200 calls would be one scheduler tick and all noise); with `us_per_call`, the system's
    earlier time at this size or a smaller one, no more than fit in RUN_BUDGET_S. Every run still
    times back-to-back calls after warmups; only the count shrinks, and only for slow runs."""
    calls = max(10, min(5000, (256 << 20) // max(1, nbytes * world)))
    if us_per_call:
        calls = min(calls, max(10, int(RUN_BUDGET_S * 1e6 / us_per_call)))
    return calls


def warmups(iters):
    return max(2, iters // 10)


class Pace:
    """Each system's time per call so far, which sizes its next run (iterations' us_per_call):
    at the same size from an earlier round, else at the largest smaller size. Times grow with
    size, so a smaller size's time can only overfill the budget, by the step between sizes."""

    def __init__(self):
        self.us = {}

    def add(self, name, world, nbytes, us):
        if us:
            self.us[(name, world, nbytes)] = us

    def unknown(self, name, world):
        return not any(k[:2] == (name, world) for k in self.us)

    def get(self, name, world, nbytes):
        if (name, world, nbytes) in self.us:
            return self.us[(name, world, nbytes)]
        smaller = [(n, us) for (s, w, n), us in self.us.items()
                   if (s, w) == (name, world) and n < nbytes]
        return max(smaller)[1] if smaller else None


class Samples:
    """Times per (world, size, system, round), with each (round, world, size)'s busy sample."""

    def __init__(self):
        self.times = {}
        self.busy = {}

    def add_busy(self, rnd, world, nbytes, busy):
        self.busy[(rnd, world, nbytes)] = busy

    def add(self, rnd, world, nbytes, name, us):
        if us is not None:
            self.times[(world, nbytes, name, rnd)] = us

    def loaded(self, rnd, world, nbytes):
        return self.busy.get((rnd, world, nbytes), 0.0) > BUSY_LIMIT

    def _rounds(self, world, nbytes, name):
        """(round, us) of clean rounds, or of all rounds when none was clean (then marked)."""
        got = [(r, us) for (w, n, s, r), us in self.times.items()
               if (w, n, s) == (world, nbytes, name)]
        clean = [(r, us) for r, us in got if not self.loaded(r, world, nbytes)]
        return (clean, False) if clean else (got, bool(got))

    def best(self, world, nbytes, name):
        """The best clean time, and whether it had to come from a loaded round."""
        got, marked = self._rounds(world, nbytes, name)
        return (min(us for _, us in got), marked) if got else (None, False)

    def ratio(self, world, nbytes, name, peer):
        """best(name) / best(peer), and (lowest, highest) of the per-round ratios over the rounds
        where both ran clean; None where either never ran."""
        a, am = self.best(world, nbytes, name)
        b, bm = self.best(world, nbytes, peer)
        if a is None or b is None:
            return None
        mine = dict(self._rounds(world, nbytes, name)[0])
        theirs = dict(self._rounds(world, nbytes, peer)[0])
        per_round = [mine[r] / theirs[r] for r in mine if r in theirs]
        spread = (min(per_round), max(per_round)) if per_round else (a / b, a / b)
        return a / b, spread, am or bm

    def loaded_count(self):
        return sum(1 for v in self.busy.values() if v > BUSY_LIMIT), len(self.busy)


def ratio_cell(r):
    """'0.83 (0.80-0.91)', with a dagger where a loaded round had to be used."""
    if r is None:
        return "-"
    value, (lo, hi), marked = r
    return f"{value:.2f} ({lo:.2f}-{hi:.2f})" + (" †" if marked else "")
