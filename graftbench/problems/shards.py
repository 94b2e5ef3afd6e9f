"""Shards of a problem set (``--shard i/N``): a deterministic slice that does not depend on the file's order.

A problem belongs to shard ``int(SHA-256(id)[:8]) mod N``, so reordering the problem file, or adding problems,
never moves a problem to another shard of the same count. Each shard is an ordinary run in its own folder; its
manifest records the shard and every problem's position in the whole set, which is what ``graftbench merge``
(:mod:`graftbench.scale.merge`) needs to rebuild the single-process run. Imports no torch.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Sequence, TypeVar

T = TypeVar("T")

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based: ``0 <= index < count``). ``str()`` gives ``"i/N"``.

    Raises ``ValueError`` for a count below 1 or an index outside ``[0, count)``."""

    index: int
    count: int

    def __post_init__(self):
        if self.count < 1:
            raise ValueError(f"shard '{self.index}/{self.count}': the shard count N must be at least 1")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard '{self.index}/{self.count}': the index must be 0 to {self.count - 1} "
                             "(shards are numbered from 0)")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, problem_id: str) -> bool:
        """Whether the problem ``problem_id`` belongs to this shard."""
        return shard_of(problem_id, self.count) == self.index


def parse_shard(spec: str | None) -> Shard | None:
    """``"i/N"`` as a :class:`Shard`; ``None`` (no sharding) stays ``None``.

    Raises ``ValueError`` naming the spec when it is not two integers ``i/N`` with ``0 <= i < N``."""
    if spec is None:
        return None
    match = _SPEC.match(spec)
    if match is None:
        raise ValueError(f"shard '{spec}' is not of the form i/N (e.g. 0/4: the first of 4 shards)")
    return Shard(int(match.group(1)), int(match.group(2)))


def shard_of(problem_id: str, count: int) -> int:
    """The shard (0 to ``count - 1``) that holds the problem ``problem_id``: the first 8 bytes of the SHA-256 of
    its UTF-8 id, big-endian, modulo ``count``."""
    digest = hashlib.sha256(problem_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def select(items: Sequence[T], shard: Shard | None, key=lambda item: item.id) -> list[tuple[int, T]]:
    """The ``(position, item)`` pairs of ``items`` that ``shard`` holds, in their order (every item when ``shard``
    is ``None``); ``key`` gives an item's problem id."""
    return [(i, item) for i, item in enumerate(items) if shard is None or shard.holds(key(item))]
