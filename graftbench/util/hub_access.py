"""Whether the Hugging Face hub can be reached, asked once and fast, before a hub id is loaded.

The hub libraries retry a host they cannot reach for half a minute and then fail with a message cut short. A model
or dataset given as a hub id is checked here first: ``HF_HUB_OFFLINE`` set, or no TCP connection to the hub's host
(or to the HTTPS proxy, when one is configured) within ``CONNECT_TIMEOUT_S``, means the hub is unreachable, and the
caller then loads from this machine's hub cache only or fails with one line saying how to run offline. Imports no
torch, and no hub library until asked about the cache.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

CONNECT_TIMEOUT_S = 3.0  # seconds to open one TCP connection to the hub (or the proxy)
OFFLINE_ENV = "HF_HUB_OFFLINE"


def offline_hint(local: str) -> str:
    """How to run offline, as a clause: pass ``local`` (e.g. ``a model folder or .gguf file``) instead, or set
    ``HF_HUB_OFFLINE=1`` to load hub ids from the hub cache only."""
    return (f"to run offline, pass {local} instead, or set {OFFLINE_ENV}=1 to load hub ids from this machine's hub "
            "cache only (download them first where there is network)")


OFFLINE_HINT = offline_hint("a local model folder or .gguf file")


def offline_requested() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks the hub libraries not to use the network (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _target() -> tuple[str, int]:
    """The host and port a hub request connects to first: the HTTPS proxy's when one is set, else the hub's."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy") or os.environ.get("ALL_PROXY") \
        or os.environ.get("all_proxy")
    url = urlsplit(proxy if proxy else os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    default = 443 if url.scheme == "https" else 80
    return url.hostname or "huggingface.co", url.port or default


def hub_unreachable() -> str | None:
    """``None`` when a TCP connection to the hub (or its proxy) opens within ``CONNECT_TIMEOUT_S``; otherwise why
    not, as a clause (``HF_HUB_OFFLINE is set``, ``huggingface.co:443 cannot be reached (Name or service not
    known)``). Raises nothing."""
    if offline_requested():
        return f"{OFFLINE_ENV} is set"
    host, port = _target()
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return f"{host}:{port} cannot be reached ({exc.strerror or exc.__class__.__name__})"
    return None


def cached_model(repo_id: str) -> bool:
    """Whether this machine's hub cache holds the model ``repo_id``'s ``config.json`` (it was downloaded before)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def load_offline() -> None:
    """Make the hub libraries use the cache only from now on, in this process (``HF_HUB_OFFLINE=1``, and the
    already imported constant when the library was imported before)."""
    os.environ[OFFLINE_ENV] = "1"
    import sys

    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True


def looks_like_hub_id(spec: str) -> bool:
    """Whether a model spec is taken for a hub id: ``owner/name`` that is not a path (no leading ``.``, ``/`` or
    ``~``, not ``.gguf``, nothing at that path here)."""
    from pathlib import Path

    return (spec.count("/") == 1 and not spec.startswith((".", "/", "~")) and not spec.endswith(".gguf")
            and not Path(spec).expanduser().exists())


def hub_model_refusal(spec: str) -> str | None:
    """Before the hub id ``spec`` is loaded: ``None`` when the hub can be reached, or when it cannot and this
    machine's hub cache holds the model (the hub libraries are then told to use the cache only:
    :func:`load_offline`); otherwise one line saying why the model cannot be loaded and how to run offline."""
    why = hub_unreachable()
    if why is None:
        return None
    if cached_model(spec):
        load_offline()
        return None
    return (f"model '{spec}' is a hub id, and this machine's hub cache does not hold it while the hub cannot be used "
            f"({why}); {OFFLINE_HINT}")


def one_line(exc: BaseException) -> str:
    """An exception as one whole line: its class and its message with every run of whitespace made one space."""
    return f"{exc.__class__.__name__}: {' '.join(str(exc).split())}"
