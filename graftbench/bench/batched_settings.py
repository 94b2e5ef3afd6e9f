"""The batched-samples row's settings and their defaults (issue #14), torch-free so that the command line can
build its options from them before torch is loaded."""

from __future__ import annotations

from dataclasses import asdict, dataclass

GOAL_DECODE_RATIO = 3.0  # batched decode tokens/s over one sample at a time


@dataclass(frozen=True)
class BatchedSettings:
    """``samples`` decoded as one batch after one graft, against one at a time; ``tokens`` decoded per sample (EOS
    ignored); an artifact of ``artifact_tokens`` tokens; ``repeats`` timed repetitions of each side (medians
    reported); sampling at ``temperature`` within the ``top_p`` nucleus, seeds derived from ``seed``.

    Raises ``ValueError`` for a count below 1.
    """

    samples: int = 8
    tokens: int = 64
    artifact_tokens: int = 2048
    repeats: int = 3
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0

    def __post_init__(self):
        for name in ("samples", "tokens", "artifact_tokens", "repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"batched samples: {name} must be at least 1, got {getattr(self, name)}")

    @classmethod
    def smoke_run(cls) -> "BatchedSettings":
        """Tiny sizes: checks that the row runs; its figures mean nothing."""
        return cls(samples=3, tokens=4, artifact_tokens=64, repeats=1)

    def to_dict(self) -> dict:
        return asdict(self)
