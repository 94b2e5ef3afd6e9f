"""Models at a published architecture's full dimensions with random weights: ``--model random:gemma3-12b``.

Evidence at the architecture's dimensions (layers, heads, widths, sliding window, RoPE bases, context), not a
certificate for a released checkpoint: every manifest, table and report names such a model with :data:`LABEL`, and
no accuracy is ever reported for one (``solve``, ``eval``, ``deposit``, ``flywheel`` and ``run`` refuse it).

The one rule (recorded in the pin as ``random_weights``): the model is built from a bundled config
(``graftbench/engine/random_configs/<name>.json``, each citing its published source); every floating tensor of its state
dict, tied names once, is filled on the **CPU**: a weight of two or more dimensions is drawn from its own
``torch.Generator`` seeded with :func:`tensor_seed` (the first 8 bytes of SHA-256 of ``"<seed>:<name>"``),
``normal_(0, initializer_range)`` in float32 over the whole tensor, then cast to the run's dtype; a bias is zero; a
norm's 1-D weight keeps the value its class is built with (Gemma 3's zero offset, Qwen2's one). A generator per
tensor makes the values independent of the order and the number of threads the tensors are drawn in (a 27B model
is drawn on every core). The tensors are hashed on the CPU and only then moved to the device, so every device runs
the very same tensors. The weights' fingerprint is the SHA-256 of the config (canonical JSON) followed, in name
order, by each tensor's name and the SHA-256 of its raw bytes: the tensors alone do not fix the RoPE bases or the
window, and per-tensor digests are computed in parallel.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources

from ...store.tensor_hashing import tensors_sha256
from ...results.model_names import LABEL, RANDOM_PREFIX, is_random  # noqa: F401  (is_random: callers import it here)

REDUCED_LABEL = LABEL + " (reduced dimensions, not a published model)"
PREFIX = RANDOM_PREFIX
DRAW_RULE = ("cpu, a generator per tensor seeded sha256('<seed>:<name>')[:8], normal float32 then cast; bias zero; "
             "norm as built; hashed on cpu before the move")
_SPEC = re.compile(r"random:([a-z0-9][a-z0-9.\-]*)(?:@(\d{1,9}))?")


class RandomModelError(ValueError):
    """A ``random:`` spec that names no bundled config, or a bad seed; the message lists the bundled ones."""


@dataclass(frozen=True)
class RandomSpec:
    """A parsed ``random:<name>[@seed]`` spec: the bundled config's ``name`` and the generator's ``seed``."""

    name: str
    seed: int = 0


def bundled_names() -> list[str]:
    """The bundled configs' names, sorted (e.g. ``gemma3-12b``)."""
    folder = resources.files("graftbench.engine") / "random_configs"
    return sorted(entry.name[:-5] for entry in folder.iterdir() if entry.name.endswith(".json"))


def parse_spec(spec: str) -> RandomSpec:
    """Parse ``random:<name>`` or ``random:<name>@<seed>`` (seed a non-negative integer, default 0).

    Raises :class:`RandomModelError` naming the spec and the bundled configs when the name is not one of them.
    """
    match = _SPEC.fullmatch(spec or "")
    names = bundled_names()
    if not match or match.group(1) not in names:
        raise RandomModelError(f"model '{spec}' is not a random-weights spec; use random:<name>[@seed] with a name "
                               f"among {', '.join(names)}")
    return RandomSpec(match.group(1), int(match.group(2) or 0))


def load_config_dict(name: str) -> dict:
    """The bundled config ``name`` as written (its ``_source``, ``_family_tokenizer`` and ``_reduced`` keys
    included). Raises :class:`RandomModelError` for an unknown name."""
    if name not in bundled_names():
        raise RandomModelError(f"no bundled random-weights config '{name}' ({', '.join(bundled_names())})")
    text = (resources.files("graftbench.engine") / "random_configs" / f"{name}.json").read_text()
    return json.loads(text)


def label(config_dict: dict) -> str:
    """:data:`LABEL`, or :data:`REDUCED_LABEL` for a config marked ``_reduced``."""
    return REDUCED_LABEL if config_dict.get("_reduced") else LABEL


def model_config(config_dict: dict):
    """The ``transformers`` config of a bundled config dict (the keys starting with ``_`` left out)."""
    from transformers import AutoConfig

    fields = {key: value for key, value in config_dict.items() if not key.startswith("_")}
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def pin_record(spec: RandomSpec, config_dict: dict) -> dict:
    """What the pin records of a random-weights model (``random_weights``): config name, seed, draw rule, label,
    where the weights were drawn (always ``cpu``) and the published source of the dimensions."""
    return {"config": spec.name, "seed": spec.seed, "rule": DRAW_RULE, "drawn_on": "cpu",
            "label": label(config_dict), "source": config_dict.get("_source", "")}


def build(config_dict: dict, seed: int, dtype, attn_implementation: str | None = None):
    """Build the model of ``config_dict`` on the CPU in ``dtype`` (a ``torch.dtype``) with weights drawn by the
    module's rule from a generator seeded with ``seed``. Returns ``(model, weights_sha256)``; the model is in eval
    mode and still on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # older transformers 5 releases keep it in modeling_utils
        from transformers.modeling_utils import no_init_weights

    config = model_config(config_dict)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
    model.tie_weights()  # no_init_weights skips the tying too: lm_head would stay its own (unset) tensor
    std = float(config_dict.get("initializer_range", 0.02))
    entries = sorted(_untied(model).items())
    with torch.no_grad(), ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda entry: _fill(entry[0], entry[1], seed, std), entries))
        digests = list(pool.map(lambda entry: tensors_sha256([entry[1]]), entries))
    model.eval()
    return model, combine_digests(config_dict, [name for name, _ in entries], digests)


def _untied(model) -> dict:
    """``model``'s state dict without the names ``transformers`` ties to another (each tensor once)."""
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    return {name: tensor for name, tensor in model.state_dict().items() if name not in tied}


def tensor_seed(seed: int, name: str) -> int:
    """The seed of tensor ``name``'s generator: the first 8 bytes of SHA-256 of ``"<seed>:<name>"`` (UTF-8), as a
    big-endian integer below 2**63."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "big") >> 1


def _fill(name: str, tensor, seed: int, std: float) -> None:
    """Fill one state-dict tensor in place by the rule: a weight of 2+ dimensions drawn from its own generator
    (float32, then cast), a bias zero, any other floating tensor (a norm's weight) left as its class built it."""
    import torch

    if not tensor.is_floating_point():
        return
    if tensor.dim() >= 2:
        generator = torch.Generator(device="cpu").manual_seed(tensor_seed(seed, name))
        drawn = torch.empty(tensor.shape, dtype=torch.float32)
        drawn.normal_(0.0, std, generator=generator)
        tensor.copy_(drawn)
    elif name.endswith(".bias"):
        tensor.zero_()


def combine_digests(config_dict: dict, names: list[str], digests: list[str]) -> str:
    """The weights' fingerprint: SHA-256 of the canonical JSON of ``config_dict``, then for each name (in the order
    given: name order) its UTF-8 bytes and its tensor's SHA-256 (the hex digest's 32 raw bytes)."""
    from ...util.hashing import canonical_json

    digest = hashlib.sha256(canonical_json(config_dict).encode())
    for name, tensor_digest in zip(names, digests, strict=True):
        digest.update(name.encode())
        digest.update(bytes.fromhex(tensor_digest))
    return digest.hexdigest()


def weights_sha256(config_dict: dict, entries: list) -> str:
    """:func:`combine_digests` of ``(name, tensor)`` ``entries`` (CPU tensors, name order), each tensor's SHA-256
    taken one after another (:func:`build` takes them in parallel: the same digest)."""
    return combine_digests(config_dict, [name for name, _ in entries], [tensors_sha256([t]) for _, t in entries])


def parameter_count(config_dict: dict) -> int:
    """The number of distinct parameters (tied ones once) of the config's model, counted on the ``meta`` device
    (no memory is allocated): for checking a config's dimensions."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config(config_dict))
    return sum(t.numel() for t in _untied(model).values())
