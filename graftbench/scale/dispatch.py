"""The driver's bookkeeping for a run spread over workers (``--executor ray``, :mod:`graftbench.scale.ray_executor`):
the cluster options, which problems are still to run, which worker holds which, and which samples are recorded.

Exactly-once records: a sample is keyed by (problem id, sample index), and a key already recorded (in this process,
or by an earlier process of the same run folder: a resumed run) is never recorded again, whatever arrives. A worker
that is lost (its process died, its node went away, or Ray reported an error for a task that may have run) gives
its problem back to the queue; another worker runs it whole, and only the keys still missing are recorded, so a
result that arrives twice is recorded once. A problem whose run has lost :attr:`ClusterOptions.max_losses` workers
fails the run (a problem that kills every worker it is given, e.g. out of memory, is not retried forever).

Imports neither torch nor Ray: the command line reads the options, and the tests drive the ledger directly.
"""

from __future__ import annotations

import os
from collections import Counter, deque
from dataclasses import dataclass
from typing import Hashable, Iterable

EXECUTORS = ("process", "ray")  # process: this process loads the model; ray: Ray actors, one model each
RAY_EXTRA = "pip install 'graftbench[ray]'"


class DispatchError(RuntimeError):
    """A run over workers that cannot go on: Ray missing, no cluster to join, no worker with the run's pin, every
    worker lost, or a problem that lost too many workers. The message says which and what to do."""


@dataclass(frozen=True)
class ClusterOptions:
    """How a run is spread over Ray workers.

    ``workers``: how many actors to start (``None``: as many as the cluster's available CPUs hold at ``threads``
    each); ``threads``: torch threads per worker (part of the pin, so it must match the thread count the store's
    artifacts were deposited under) and the CPUs each worker reserves; ``address``: join this running Ray cluster
    (``None``: start a local one for the run, with ``local_cpus`` CPUs, by default ``workers x threads`` or this
    machine's CPU count, and shut it down at the end); ``ready_timeout_s``: seconds to wait for the first worker to
    load the model; ``problem_timeout_s``: seconds a worker may hold one problem before it is counted as lost (a
    hung worker: it is killed and the problem handed to another; ``None`` waits for ever); ``max_losses``: workers a
    problem may lose before the run fails; ``replace_lost``: start a new worker for each one lost (at most
    ``workers`` replacements in a run).

    Raises ``ValueError`` for a count below 1 or a timeout that is not positive.
    """

    workers: int | None = None
    threads: int = 1
    address: str | None = None
    local_cpus: int | None = None
    ready_timeout_s: float = 600.0
    problem_timeout_s: float | None = 3600.0
    max_losses: int = 3
    replace_lost: bool = True

    def __post_init__(self):
        for name in ("workers", "threads", "local_cpus", "max_losses"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        timeouts = {"ready_timeout_s": self.ready_timeout_s}
        if self.problem_timeout_s is not None:  # None: wait for ever
            timeouts["problem_timeout_s"] = self.problem_timeout_s
        for name, value in timeouts.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be positive seconds, got {value!r}")

    def local_cluster_cpus(self) -> int:
        """The CPUs a local cluster is started with: ``local_cpus``, else ``workers x threads``, else this
        machine's CPU count."""
        if self.local_cpus is not None:
            return self.local_cpus
        if self.workers is not None:
            return self.workers * self.threads
        return os.cpu_count() or 1

    def worker_count(self, available_cpus: float) -> int:
        """``workers``, or (when ``None``) how many workers of ``threads`` CPUs the ``available_cpus`` hold (at
        least one)."""
        if self.workers is not None:
            return self.workers
        return max(1, int(available_cpus) // self.threads)


class Ledger:
    """Which problems of a run are still to run, which worker holds which, and the samples recorded, keyed by
    (problem id, sample index).

    ``problem_ids`` in the run's order (each once); ``samples`` per problem; ``recorded`` the samples a resumed run
    already holds (sample dicts with ``problem_id`` and ``sample_index``). Problems whose samples are all recorded
    are never queued. Raises ``ValueError`` for a repeated problem id or a recorded sample of no problem here.
    """

    def __init__(self, problem_ids: list[str], samples: int, recorded: Iterable[dict] = (), max_losses: int = 3):
        if len(set(problem_ids)) != len(problem_ids):
            raise ValueError("a problem id appears twice in the run's problems")
        self.problem_ids = list(problem_ids)
        self.samples = samples
        self.max_losses = max_losses
        self.recorded: dict[tuple[str, int], dict] = {}
        self.ignored = 0
        self._positions = {pid: i for i, pid in enumerate(self.problem_ids)}
        self._held: dict[Hashable, int] = {}
        self._losses: Counter[int] = Counter()
        self._again: set[int] = set()  # queued by retry(): run even if its samples are recorded meanwhile
        for sample in recorded:
            self._record_one(sample)
        self._queue = deque(i for i, pid in enumerate(self.problem_ids) if self.missing(pid))

    def _key(self, sample: dict) -> tuple[str, int]:
        key = (sample.get("problem_id"), sample.get("sample_index", 0))
        if key[0] not in self._positions or not isinstance(key[1], int) or not 0 <= key[1] < self.samples:
            raise ValueError(f"sample {key[0]}#{key[1]} belongs to no problem of this run")
        return key

    def _record_one(self, sample: dict) -> bool:
        key = self._key(sample)
        if key in self.recorded:
            self.ignored += 1
            return False
        self.recorded[key] = sample
        return True

    def missing(self, problem_id: str) -> list[int]:
        """The sample indices of ``problem_id`` not recorded yet."""
        return [i for i in range(self.samples) if (problem_id, i) not in self.recorded]

    @property
    def finished(self) -> bool:
        """Whether every (problem, sample index) of the run is recorded."""
        return len(self.recorded) == len(self.problem_ids) * self.samples

    @property
    def queued(self) -> int:
        """Problems waiting for a worker."""
        return len(self._queue)

    def holding(self, worker: Hashable) -> str | None:
        """The problem id ``worker`` holds, or ``None``."""
        position = self._held.get(worker)
        return None if position is None else self.problem_ids[position]

    def take(self, worker: Hashable) -> int | None:
        """Give ``worker`` the next problem to run (its position in the run's order), or ``None`` when none is
        waiting. A problem recorded meanwhile is skipped. Raises ``ValueError`` if ``worker`` holds one already."""
        if worker in self._held:
            raise ValueError(f"worker {worker!r} already holds problem {self.holding(worker)}")
        while self._queue:
            position = self._queue.popleft()
            if self.missing(self.problem_ids[position]) or position in self._again:
                self._again.discard(position)
                self._held[worker] = position
                return position
        return None

    def record(self, worker: Hashable, samples: list[dict]) -> list[dict]:
        """Record what ``worker`` returned for the problem it holds and free it; returns the samples newly recorded
        (in the order given), leaving out any key already recorded (counted in ``ignored``). A problem still
        missing samples afterwards goes back to the queue. Raises ``ValueError`` for a sample of no problem here."""
        position = self._held.pop(worker, None)
        new = [sample for sample in samples if self._record_one(sample)]
        if position is not None:
            self._requeue(position)
        return new

    def lose(self, worker: Hashable) -> str | None:
        """``worker`` is gone: the problem it held (returned) goes back to the queue, at its front, unless its
        samples are all recorded. Raises :class:`DispatchError` when that problem has now lost ``max_losses``
        workers."""
        position = self._held.pop(worker, None)
        if position is None:
            return None
        problem_id = self.problem_ids[position]
        self._losses[position] += 1
        if self.missing(problem_id) and self._losses[position] >= self.max_losses:
            raise DispatchError(f"problem {problem_id} lost {self._losses[position]} workers (each died or was "
                                "lost while running it); it may crash any worker (out of memory?): run it alone, or "
                                "leave it out")
        self._requeue(position, front=True)
        return problem_id

    def retry(self, problem_id: str) -> None:
        """Queue ``problem_id`` to run once more, at the front, even if its samples are recorded: a driver that
        cannot tell whether a run finished runs it again. Its samples that arrive again are ignored (``ignored``)."""
        position = self._positions[problem_id]
        self._again.add(position)
        if position not in self._queue:
            self._queue.appendleft(position)

    def _requeue(self, position: int, front: bool = False) -> None:
        if self.missing(self.problem_ids[position]) and position not in self._queue \
                and position not in self._held.values():
            (self._queue.appendleft if front else self._queue.append)(position)

    def ordered(self) -> list[dict]:
        """Every recorded sample in the run's order: problem order, then sample index (what a single process
        writes into the manifest)."""
        return [self.recorded[(pid, i)] for pid in self.problem_ids for i in range(self.samples)
                if (pid, i) in self.recorded]
