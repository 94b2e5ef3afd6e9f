"""Open a store by its root: a folder path, or a URL of object storage (``s3://``, ``file://``, ``memory://``).

The one place that tells the two kinds apart: :func:`open_store` gives a folder :class:`~graftbench.store.folder.Store`
or an :class:`~graftbench.store.object_store.ObjectStore`, and :func:`require_store`, :func:`clean_store` and
:func:`reindex_store` act on either.
"""

from __future__ import annotations

from pathlib import Path

from .folder import Store, clean_folder_store, is_store_url, reindex_folder_store, require_folder_store
from .index import ReindexReport
from .object_store import ObjectStore, clean_object_store, require_object_store


def open_store(root: str | Path, *, create: bool = True, readonly: bool = False) -> Store:
    """The store at ``root``: an :class:`ObjectStore` for a URL (:func:`is_store_url`), else a folder
    :class:`Store`. ``create`` and ``readonly`` as for :class:`Store`; raises what their constructors raise
    (:class:`graftbench.store.index.StoreError` for a store that cannot be opened)."""
    if is_store_url(root):
        return ObjectStore(root, create=create, readonly=readonly)
    return Store(root, create=create, readonly=readonly)


def require_store(root: str | Path) -> None:
    """Check that a store with an index exists at ``root`` without opening or creating anything (what ``eval
    --graft`` checks before it loads a model). Raises :class:`graftbench.store.index.StoreError` naming the path
    otherwise (``missing`` when the folder does not exist); a URL is checked on its object storage."""
    if is_store_url(root):
        return require_object_store(root)
    return require_folder_store(root)


def clean_store(root: str | Path) -> list[Path]:
    """Remove the temporary files that killed writers left in the store at ``root``, never one a live process is
    still writing (:func:`graftbench.store.folder.clean_folder_store`, or
    :func:`graftbench.store.object_store.clean_object_store` for a URL). Returns the paths removed; raises
    :class:`graftbench.store.index.StoreError` when ``root`` is not an existing store."""
    if is_store_url(root):
        return clean_object_store(root)
    return clean_folder_store(root)


def reindex_store(root: str | Path) -> tuple[ReindexReport, list[Path]]:
    """Rebuild the index of the store at ``root`` from its artifacts (a folder's files, or a URL's objects), after
    removing the temporary files of killed writers. Returns (the report, the temporary files removed). Raises
    :class:`graftbench.store.index.StoreError` when ``root`` is not a store, and ``OSError`` when the new index
    cannot be written."""
    if is_store_url(root):
        store = ObjectStore(root, create=False)
        return store.reindex(), store.cleaned
    return reindex_folder_store(root)
