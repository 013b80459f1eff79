"""Persistent compile artifacts for ``--cache warm``: stored with a metadata file
that names what they were built for and the hash of every file, so a stored
artifact is used only when it matches this cell and is intact."""
from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator

from filelock import FileLock

from compare.results.files import atomic_write_text

META = "artifact.json"


def store_for(backend, ctx) -> tuple[Path, dict[str, Any]]:
    """Where a backend's artifacts for this cell live, and the metadata a stored one must match.
    Warm: ``<cache_root>/<backend>/<target key>/<workload key>/``; cold: a fresh folder."""
    from .base import target_key

    versions = backend.versions()
    tkey = target_key(ctx.device, ctx.threads, versions)
    if ctx.cache == "warm":
        folder = ctx.persistent_dir(backend.name, tkey)
    else:
        folder = ctx.work_dir / backend.name
        folder.mkdir(parents=True, exist_ok=True)
    expected = {"target_key": tkey, "workload_key": ctx.workload_key, "versions": versions}
    if ctx.calibration is not None:  # an int8 artifact is only as good as the quantizer settings it was built with
        expected["quantizer"] = backend.settings(ctx).get("quantizer")
    return folder, expected


def locked(folder: Path) -> FileLock:
    """Exclusive lock on a store folder for check + build + load: another run never
    reads an artifact while this one rewrites it."""
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(folder / ".lock")


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_meta(folder: Path, files: list[str], expected: dict[str, Any]) -> None:
    """Written last, after the artifacts themselves, by rename: no half-valid state."""
    meta = dict(expected, files={name: sha256(folder / name) for name in files})
    atomic_write_text(folder / META, json.dumps(meta, indent=2))


def is_valid(folder: Path, expected: dict[str, Any]) -> bool:
    try:
        meta = json.loads((folder / META).read_text())
        if not isinstance(meta, dict) or any(meta.get(k) != v for k, v in expected.items()):
            return False
        files = meta.get("files") or {}
        return bool(files) and all(sha256(folder / name) == digest for name, digest in files.items())
    except (OSError, ValueError):
        return False


def evidence(folder: Path, hit: bool) -> dict[str, Any]:
    try:
        files = json.loads((folder / META).read_text()).get("files", {})
    except (OSError, ValueError):
        files = {}
    return {"artifact_dir": str(folder), "loaded_from_store": hit,
            "files": {name: digest[:16] for name, digest in files.items()}}


@contextlib.contextmanager
def one_file(backend, ctx, name: str, build: Callable[[Path], None], key: dict[str, Any] | None = None,
             built_phases: tuple[str, ...] = ("export", "compile")) -> Iterator[tuple[Path, Any]]:
    """A backend whose build is one file (IREE's vmfb, AOTInductor's .pt2): warm and stored
    intact, reuse it (``built_phases`` are then 0); else ``build(path)`` and store it. Yields
    the file and the cache verdict, with the store's lock held while the caller loads it.
    ``key``: more that a stored file must have been built with (settings)."""
    from .base import CacheVerdict

    folder, expected = store_for(backend, ctx)
    expected.update(key or {})
    with locked(folder) if ctx.cache == "warm" else contextlib.nullcontext():
        path = folder / name
        hit = ctx.cache == "warm" and is_valid(folder, expected)
        if hit:
            ctx.phases.update(dict.fromkeys(built_phases, 0.0))
        else:
            build(path)
            write_meta(folder, [name], expected)
        yield path, CacheVerdict("hit" if hit else "miss", evidence(folder, hit))


def tensors_sha256(batches: list) -> str:
    """One hash over every calibration tensor (dtype, shape, bytes): the same data in
    every backend's cell reads the same hash."""
    import hashlib

    digest = hashlib.sha256()
    for batch in batches:
        for tensor in batch:
            digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
