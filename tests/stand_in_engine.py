"""A stand-in engine used only by the tests: a third engine that imports neither torch nor llama_cpp, with its own
model, tokenizer, KV state bytes and artifact format, registered through the public path
(:func:`graftbench.engine.registry.register`), so that the conformance suite
(``tests/contract/test_engine_conformance.py``) and the commands (``solve``, ``deposit``, ``eval --graft --certify``,
``check-exact --controls``, ``verify-manifest``) show what a new engine needs and nothing more.

The model is a toy language model on numpy float32, small and fast, with the properties the exactness contract is
about:

- each position keeps a key (its token's embedding rotated by its position, as RoPE does) and a value; the state
  bytes are every position's key and value and the running sum of the values (:func:`encode_state_bytes`);
- a chunk's forward adds its values to the running sum one position after another from the chunk's first token, so
  another chunk schedule rounds differently (the ``monolithic`` control), while a restored state continued with
  the same schedule gives the bytes a fresh prefill gives;
- each position attends to the keys of the last :data:`WINDOW` positions, so one flipped bit of the last key moves
  the next position's logits (the ``key-bit-flip`` control), and keys re-rotated to other positions round
  differently from keys computed there (``shift-8``).

Every sum is a sequential ``cumsum`` (never a reduction whose order may follow memory alignment), so the bytes
depend only on the inputs and the chunk schedule.

The broken twin (:data:`BROKEN_TWIN`) restores a state one position off; the conformance checks must fail for it.
"""

from __future__ import annotations

import hashlib
import platform
import re
import struct
import time
from dataclasses import dataclass, field
from importlib.metadata import version

import numpy as np

from graftbench.engine.base import (EXACTNESS_CONTROLS, SAMPLE_BATCH, Deposited, EngineOpenError, EngineOptions,
                                    Grafted)
from graftbench.engine.pin import PinnedConfig
from graftbench.engine.prompt_ids import PromptIds
from graftbench.problems.prompts import PromptLayout
from graftbench.results.samples import Decoded
from graftbench.store.codec import ArtifactError

NAME = "stand-in"
MODEL_PREFIX = "stand-in-tiny"  # a model spec: stand-in-tiny, or stand-in-tiny@SEED for other weights
STATE_FORMAT = "graftbench.test.stand-in-state/1"  # the artifact header's format
STATE_MAGIC = b"SISTATE1"
DIM = 16  # floats per key and per value
WINDOW = 8  # positions each position attends to (itself and the 7 before it)
BOS, EOS, OFFSET = 1, 2, 3  # special token ids; byte b is token b + OFFSET
VOCAB = 256 + OFFSET
N_CTX = 8192  # tokens a cache holds
SHIFTS = (8,)
HEADER_PIN_FIELDS = ("config_fingerprint", "weights_sha256", "tokenizer_sha256", "chunk_size", "engine")


# ---- the tokenizer: bytes, with a start and an end token ------------------------------------------------------------

@dataclass
class _Encoding:
    input_ids: list[int]


class ByteTokenizer:
    """Each UTF-8 byte is one token (``byte + OFFSET``); ``BOS`` starts a text with special tokens, ``EOS`` ends a
    generation. No chat template: prompts are the layout's plain text (:class:`graftbench.engine.prompt_ids.PromptIds`)."""

    chat_template = None
    bos_token_id, eos_token_id = BOS, EOS

    def __call__(self, text: str, add_special_tokens: bool = True) -> _Encoding:
        ids = [b + OFFSET for b in text.encode("utf-8")]
        return _Encoding([BOS, *ids] if add_special_tokens else ids)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        data = bytes(int(t) - OFFSET for t in ids if int(t) >= OFFSET)
        return data.decode("utf-8", "replace")

    def get_vocab(self) -> dict[str, int]:
        return {"<bos>": BOS, "<eos>": EOS, **{f"<0x{b:02X}>": b + OFFSET for b in range(256)}}


TOKENIZER_SHA256 = hashlib.sha256(f"stand-in bytes+{OFFSET} bos {BOS} eos {EOS}".encode()).hexdigest()


# ---- the model ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Weights:
    """The toy model's float32 weights, drawn from ``seed``: token embeddings (keys before rotation), values, the
    output projection and the rotation frequencies."""

    embed: np.ndarray  # [VOCAB, DIM]
    values: np.ndarray  # [VOCAB, DIM]
    out: np.ndarray  # [DIM, VOCAB]
    freqs: np.ndarray  # [DIM // 2]

    @classmethod
    def draw(cls, seed: int) -> "Weights":
        rng = np.random.default_rng(seed)
        return cls(rng.standard_normal((VOCAB, DIM), dtype=np.float32),
                   rng.standard_normal((VOCAB, DIM), dtype=np.float32),
                   rng.standard_normal((DIM, VOCAB), dtype=np.float32),
                   (1.0 / (100.0 ** (np.arange(DIM // 2, dtype=np.float32) / (DIM // 2)))).astype(np.float32))

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for array in (self.embed, self.values, self.out, self.freqs):
            digest.update(np.ascontiguousarray(array, dtype="<f4").tobytes())
        return digest.hexdigest()


def rotate(x: np.ndarray, positions: np.ndarray, freqs: np.ndarray) -> np.ndarray:
    """``x`` ``[n, DIM]`` rotated pairwise (first half against second half) by ``position * freq``, as RoPE does."""
    angles = positions.astype(np.float32)[:, None] * freqs[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    first, second = x[:, :DIM // 2], x[:, DIM // 2:]
    return np.concatenate([first * cos - second * sin, first * sin + second * cos], axis=1).astype(np.float32)


def _sequential_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """The sum of ``x`` along ``axis`` added one element after another (``cumsum``'s last), in ``x``'s dtype."""
    return np.take(np.cumsum(x, axis=axis, dtype=x.dtype), -1, axis=axis)


@dataclass
class Cache:
    """One sequence: ``keys`` and ``values`` ``[n, DIM]`` of the positions held, ``total`` the running sum of the
    values (float32 ``[DIM]``), ``next_position`` where the next token goes (``n``, or ``n + shift`` after a shifted
    restore: the controls only), ``token_ids`` the ids held."""

    keys: np.ndarray = field(default_factory=lambda: np.zeros((0, DIM), np.float32))
    values: np.ndarray = field(default_factory=lambda: np.zeros((0, DIM), np.float32))
    total: np.ndarray = field(default_factory=lambda: np.zeros(DIM, np.float32))
    next_position: int = 0
    token_ids: list[int] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.token_ids)

    def copy(self) -> "Cache":
        return Cache(self.keys.copy(), self.values.copy(), self.total.copy(), self.next_position, list(self.token_ids))


def forward(weights: Weights, cache: Cache, ids: list[int]) -> np.ndarray:
    """One forward of ``ids`` (one chunk) at the cache's next positions; appends them to ``cache`` and returns their
    logits ``[len(ids), VOCAB]`` (float32). Raises ``ValueError`` for an id outside the vocabulary."""
    tokens = np.asarray(ids, dtype=np.int64)
    if tokens.size == 0 or tokens.min() < 0 or tokens.max() >= VOCAB:
        raise ValueError(f"token ids must be 0..{VOCAB - 1} and at least one, got {ids[:4]}...")
    positions = cache.next_position + np.arange(len(tokens))
    keys = rotate(weights.embed[tokens], positions, weights.freqs)
    values = weights.values[tokens]
    start = cache.n
    cache.keys = np.concatenate([cache.keys, keys])
    cache.values = np.concatenate([cache.values, values])
    running = cache.total[None, :] + np.cumsum(values, axis=0, dtype=np.float32)  # the chunk's partial sums first
    cache.total = running[-1].copy()
    cache.next_position += len(tokens)
    cache.token_ids.extend(int(t) for t in tokens)
    window = start + np.arange(len(tokens))[:, None] - np.arange(WINDOW)[None, ::-1]  # [c, WINDOW] cache rows
    valid = window >= 0
    rows = np.where(valid, window, 0)
    scores = _sequential_sum(keys[:, None, :] * cache.keys[rows], axis=2) * np.float32(0.25)
    scores = np.where(valid, scores, np.float32(-np.inf))
    weights_ = np.exp(scores - scores.max(axis=1, keepdims=True)).astype(np.float32)
    attended = _sequential_sum(weights_[:, :, None] * cache.values[rows], axis=1)
    attended = attended / _sequential_sum(weights_, axis=1)[:, None]
    hidden = np.tanh(running * np.float32(0.05) + attended).astype(np.float32)
    return _sequential_sum(hidden[:, :, None] * weights.out[None, :, :], axis=1)


def prefill(weights: Weights, cache: Cache, ids: list[int], chunk_size: int) -> np.ndarray:
    """``ids`` appended in forwards of ``chunk_size`` tokens from the first of them; every position's logits
    ``[len(ids), VOCAB]``. Raises ``ValueError`` for no ids."""
    if not ids:
        raise ValueError("cannot prefill no tokens")
    return np.concatenate([forward(weights, cache, list(ids[i:i + chunk_size]))
                           for i in range(0, len(ids), chunk_size)])


# ---- the state bytes and the artifact ------------------------------------------------------------------------------

def encode_state_bytes(cache: Cache) -> bytes:
    """The state bytes of a whole sequence: ``STATE_MAGIC``, ``n`` and ``DIM`` (uint32), the positions (int64
    ``[n]``), keys and values (float32 ``[n, DIM]``) and the running sum (float32 ``[DIM]``), little-endian."""
    positions = np.arange(cache.n, dtype="<i8")
    return b"".join([STATE_MAGIC, struct.pack("<II", cache.n, DIM), positions.tobytes(),
                     np.ascontiguousarray(cache.keys, "<f4").tobytes(),
                     np.ascontiguousarray(cache.values, "<f4").tobytes(),
                     np.ascontiguousarray(cache.total, "<f4").tobytes()])


def decode_state_bytes(state, token_ids: list[int], artifact_id: str = "") -> Cache:
    """The cache held by ``state`` (:func:`encode_state_bytes`) holding ``token_ids``. Raises
    :class:`graftbench.store.codec.ArtifactError` (``payload``) for bytes that do not follow the layout to their end,
    or positions that are not ``0..n-1``."""
    data = bytes(state)
    head = len(STATE_MAGIC) + 8
    if data[:len(STATE_MAGIC)] != STATE_MAGIC or len(data) < head:
        raise ArtifactError(artifact_id, "payload", "not a stand-in state")
    n, dim = struct.unpack_from("<II", data, len(STATE_MAGIC))
    if dim != DIM or n != len(token_ids) or len(data) != head + 8 * n + 4 * (2 * n * DIM + DIM):
        raise ArtifactError(artifact_id, "payload", f"a state of {n} positions of {dim} does not hold its "
                                                    f"{len(token_ids)} tokens in {len(data)} bytes")
    offset = head + 8 * n
    positions = np.frombuffer(data, "<i8", n, head)
    if not np.array_equal(positions, np.arange(n)):
        raise ArtifactError(artifact_id, "payload", "positions are not 0..n-1")
    keys = np.frombuffer(data, "<f4", n * DIM, offset).reshape(n, DIM).copy()
    values = np.frombuffer(data, "<f4", n * DIM, offset + 4 * n * DIM).reshape(n, DIM).copy()
    total = np.frombuffer(data, "<f4", DIM, offset + 8 * n * DIM).copy()
    return Cache(keys, values, total, n, list(token_ids))


def pin_header(config: PinnedConfig) -> dict:
    """The header fields that tie a state to the pin ``config``."""
    return {"config_fingerprint": config.fingerprint, "weights_sha256": config.weights_sha256,
            "tokenizer_sha256": config.tokenizer_sha256, "chunk_size": config.chunk_size, "engine": config.engine}


def encode_artifact(config: PinnedConfig, cache: Cache, meta: dict) -> bytes:
    """The artifact bytes of ``cache`` (a whole sequence) under ``config``, with the header fields ``meta``, in the
    store's container for an engine's state (token ids and state bytes) under :data:`STATE_FORMAT`."""
    from graftbench.store.llama_state import encode_state

    header = {**meta, **pin_header(config), "model": config.model, "dtype": config.dtype, "parent": None}
    return encode_state(header, cache.token_ids, encode_state_bytes(cache), format=STATE_FORMAT)


# ---- the session: what a run needs (graftbench.engine.base.EngineSession) -----------------------------------------

@dataclass
class StandInSession(PromptIds):
    """The stand-in model loaded under its pin: the run-level operations of :class:`graftbench.engine.base.EngineSession`."""

    weights: Weights
    config: PinnedConfig
    tokenizer: ByteTokenizer = field(default_factory=ByteTokenizer)
    eos_ids: set[int] = field(default_factory=lambda: {EOS})
    engine_name: str = NAME
    capabilities: frozenset[str] = frozenset({SAMPLE_BATCH, EXACTNESS_CONTROLS})
    restore_offset: int = 0  # 0; the broken twin restores one position off

    @property
    def context_window(self) -> int:
        return N_CTX

    def _prefill(self, cache: Cache, ids: list[int]) -> np.ndarray:
        if cache.n + len(ids) > N_CTX:
            raise ValueError(f"{cache.n} cached + {len(ids)} new tokens exceed the context of {N_CTX}")
        return prefill(self.weights, cache, ids, self.config.chunk_size)

    def prefill_prompt(self, ids: list[int]):
        cache = Cache()
        return cache, self._prefill(cache, ids)[-1]

    def prefill_after(self, cache: Cache, ids: list[int]):
        return self._prefill(cache, ids)[-1]

    def restore(self, state, token_ids: list[int], artifact_id: str = "") -> Cache:
        """A cache holding the state bytes ``state`` of ``token_ids`` at their own positions."""
        cache = decode_state_bytes(state, token_ids, artifact_id)
        cache.next_position += self.restore_offset
        return cache

    def graft(self, store, artifact_id: str, room: int = 0) -> Grafted:
        """The state ``artifact_id`` read from ``store`` (the container's checks: size, hash, layout, format),
        its pin checked (``config``) and restored. Raises :class:`ArtifactError`."""
        header, token_ids, state = store.read_state(artifact_id, formats=(STATE_FORMAT,))
        for name, value in pin_header(self.config).items():
            if header.get(name) != value:
                raise ArtifactError(artifact_id, "config", f"{name} differs from this run's pin")
        if len(token_ids) + room > N_CTX:
            raise ArtifactError(artifact_id, "config", f"{len(token_ids)} tokens and {room} more do not fit the "
                                                       f"context of {N_CTX}")
        return Grafted(self.restore(state, token_ids, artifact_id), [header], [list(token_ids)])

    def prefill_chain(self, segments: list[list[int]], query: list[int]):
        cache = Cache()
        for ids in segments:
            self._prefill(cache, ids)
        return cache, self._prefill(cache, query)[-1]

    def recompute(self, segments: list[list[int]], query: list[int]):
        return self.prefill_chain(segments, query)[1]

    def logits_sha256(self, logits) -> str:
        return hashlib.sha256(np.ascontiguousarray(logits, dtype="<f4").tobytes()).hexdigest()

    def decode(self, cache: Cache, logits, budget: int, sampling, seeds: list[int] | None, stop,
               started: float) -> tuple:
        """Greedy when ``seeds`` is ``None``, else one sample per seed (temperature and nucleus of ``sampling``,
        a generator seeded with the sample's seed), each on its own copy of ``cache``; at most ``budget`` tokens
        (cut to the room left in the context)."""
        budget = max(0, min(budget, N_CTX - cache.n))
        if seeds is None:
            return (self._decode_one(cache, logits, budget, None, None, stop, started),)
        caches = [cache, *(cache.copy() for _ in seeds[1:])]  # each sample after the prompt's own state
        return tuple(self._decode_one(here, logits, budget, sampling, seed, stop, started)
                     for here, seed in zip(caches, seeds))

    def _decode_one(self, cache: Cache, logits, budget: int, sampling, seed, stop, started: float) -> Decoded:
        rng = np.random.default_rng(seed) if sampling is not None else None
        tokens: list[int] = []
        first_token_s, decode_start, reason = 0.0, time.perf_counter(), "budget"
        while len(tokens) < budget:
            tokens.append(_choose(logits, sampling, rng))
            if len(tokens) == 1:
                first_token_s = time.perf_counter() - started
            reason = _finish_reason(self.tokenizer, tokens, self.eos_ids, stop) or reason
            if reason != "budget":
                break
            if len(tokens) < budget:
                logits = forward(self.weights, cache, [tokens[-1]])[-1]
        text_ids = tokens[:-1] if reason == "eos" else tokens
        return Decoded(tokens, self.tokenizer.decode(text_ids), reason, first_token_s,
                       time.perf_counter() - decode_start)

    def build_artifact(self, ids: list[int], meta: dict) -> bytes:
        cache = Cache()
        self._prefill(cache, ids)
        return encode_artifact(self.config, cache, meta)

    def exactness(self) -> "StandInChecks":
        return StandInChecks(self)

    def describe(self, model: str) -> str:
        return (f"model {model} on the stand-in engine (numpy {version('numpy')}) · config "
                f"{self.config.fingerprint[:12]}")


def _choose(logits, sampling, rng) -> int:
    """argmax, or a draw at ``sampling``'s temperature among the most likely tokens holding ``top_p``."""
    logits = np.asarray(logits, dtype=np.float64)
    if sampling is None:
        return int(np.argmax(logits))
    scaled = logits / max(float(sampling.temperature), 1e-6)
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    kept = order[:int(np.searchsorted(np.cumsum(probs[order]), float(sampling.top_p))) + 1]
    return int(rng.choice(kept, p=probs[kept] / probs[kept].sum()))


def _finish_reason(tokenizer, tokens: list[int], eos_ids: set[int], stop) -> str | None:
    if tokens[-1] in eos_ids:
        return "eos"
    if stop is not None:
        text = tokenizer.decode(tokens)
        if (stop.search(text) if isinstance(stop, re.Pattern) else stop in text):
            return "stop"
    return None


# ---- check-exact: graft against a fresh prefill, and the controls (graftbench.engine.base.ExactnessChecks) ---------

@dataclass
class StandInChecks:
    """The stand-in's exactness checks: the pair's state deposited (its bytes round trip), restored, then the
    query, against a fresh prefill of both; the controls ``monolithic``, ``chunk-N`` (reported as measured),
    ``shift-8`` and ``key-bit-flip`` (the highest mantissa bit of element 0 of the artifact's last key)."""

    session: StandInSession
    deposit_field: str = "state_sha256"
    deposit_label: str = "state"
    window: int = 0

    def deposit(self, artifact: list[int]) -> Deposited:
        """The state bytes after ``artifact`` is prefilled (payload: the bytes and the ids they hold)."""
        cache = Cache()
        self.session._prefill(cache, artifact)
        state = encode_state_bytes(cache)
        return Deposited(hashlib.sha256(state).hexdigest(), (state, list(artifact)))

    def _graft(self, deposited: Deposited, query: list[int], shift: int = 0, flip: bool = False):
        """The query's logits after ``deposited`` is restored (its keys re-rotated ``shift`` positions on, or one
        bit of its last key flipped, for the controls)."""
        state, artifact = deposited.payload
        cache = self.session.restore(state, artifact)
        if flip:
            bits = cache.keys[-1:, :1].view(np.uint32)
            bits ^= np.uint32(1 << 22)
        if shift:
            cache.keys = rotate(cache.keys, np.full(cache.n, shift), self.session.weights.freqs)
            cache.next_position += shift
        return prefill(self.session.weights, cache, query, self.session.config.chunk_size)

    def graft_logits(self, deposited: Deposited, query: list[int]):
        return self._graft(deposited, query)

    def fresh_logits(self, artifact: list[int], query: list[int], chunk_size: int | None = None, shift: int = 0):
        cache = Cache(next_position=shift)
        chunk = chunk_size or self.session.config.chunk_size
        prefill(self.session.weights, cache, artifact, chunk)
        return prefill(self.session.weights, cache, query, chunk)

    def controls(self, artifact: list[int], query: list[int], fresh, deposited: Deposited):
        chunk = self.session.config.chunk_size
        mono = prefill(self.session.weights, Cache(), artifact + query, len(artifact) + len(query))
        yield "monolithic", fresh, mono[len(artifact):]
        other = chunk // 2 if chunk > 1 else 2
        yield f"chunk-{other}", fresh, self.fresh_logits(artifact, query, other)
        for shift in SHIFTS:
            yield (f"shift-{shift}", self.fresh_logits(artifact, query, shift=shift),
                   self._graft(deposited, query, shift=shift))
        yield "key-bit-flip", fresh, self._graft(deposited, query, flip=True)

    def control_settings(self) -> dict:
        return {"must_differ": sorted(["monolithic", *(f"shift-{k}" for k in SHIFTS), "key-bit-flip"]),
                "key_bit_flip": {"layer": 0, "token": "the artifact's last", "element": 0,
                                 "bit": "the highest mantissa bit of a float32 key (22)"}}

    def settings(self, problems: list, layout) -> dict:
        return {}


# ---- the factory the registry holds (graftbench.engine.base.EngineFactory) ----------------------------------------

def _seed_of(model: str) -> int:
    """The weights' seed of a ``stand-in-tiny[@SEED]`` spec. Raises :class:`EngineOpenError` for another spec."""
    match = re.fullmatch(re.escape(MODEL_PREFIX) + r"(?:@(\d+))?", model)
    if not match:
        raise EngineOpenError(f"model '{model}' is not a stand-in model ({MODEL_PREFIX} or {MODEL_PREFIX}@SEED)")
    return int(match.group(1) or 0)


class StandInFactory:
    """The stand-in engine as the registry holds it."""

    name = NAME
    capabilities = frozenset({SAMPLE_BATCH, EXACTNESS_CONTROLS})
    options = frozenset({"threads"})
    pinned_dtype = "float32"
    session_class = StandInSession
    conformance_options = EngineOptions(model=MODEL_PREFIX, chunk_size=16)

    def open(self, options: EngineOptions) -> StandInSession:
        weights = Weights.draw(_seed_of(options.model))
        config = PinnedConfig(
            model=options.model, weights_sha256=weights.sha256, tokenizer_sha256=TOKENIZER_SHA256, dtype="float32",
            device="cpu", threads=options.threads or 1, attn_implementation="stand-in window attention",
            chunk_size=options.chunk_size, layout=PromptLayout(), libraries={"numpy": version("numpy")},
            machine=platform.machine(), cache_class="stand-in",
            engine={"engine": self.name, "state_format": STATE_FORMAT, "dim": DIM, "window": WINDOW, "n_ctx": N_CTX})
        return self.session_class(weights, config, engine_name=self.name)

    def loading_text(self, options: EngineOptions) -> str:
        return f"loading {options.model} on the stand-in engine"

    def fixed_pin(self) -> dict:
        """Every run pins float32 under the process's own instruction set."""
        return {"dtype": self.pinned_dtype, "isa": "native"}

    def adopt_pin(self, pin: dict) -> None:
        """Nothing to adopt: the weights are drawn from the model spec."""

    def why_not_runnable(self, pin: dict) -> str | None:
        """Any machine with numpy runs it."""
        return None

    def replay_options(self, pin: dict) -> dict:
        return {"model": pin["model"], "chunk_size": pin["chunk_size"], "threads": pin["threads"]}


@dataclass
class BrokenTwinSession(StandInSession):
    """The stand-in restoring every state one position off (its next token goes to ``n + 1``)."""

    restore_offset: int = 1


class BrokenTwinFactory(StandInFactory):
    """The broken twin: the stand-in whose restore puts the state one position off."""

    name = "stand-in-broken"
    session_class = BrokenTwinSession


ENGINE = StandInFactory()
BROKEN_TWIN = BrokenTwinFactory()
