"""dlcompare's build backend: setuptools' own, plus one file at the root of every wheel it builds.

``dlcompare_torchvision_guard.pth`` (one line: ``import dlcompare_torchvision_guard``) must land
in site-packages so that every interpreter of the environment applies the torchvision guard
(dlcompare_torchvision_guard.py). A file at a wheel's root installs into site-packages, for the
wheel of ``pip install .`` and for the PEP 660 wheel of ``pip install -e .`` alike; setuptools
has no option for such a file (``data_files`` install relative to the prefix, and the files a
custom build command writes are dropped from an editable wheel), so this backend adds it to the
wheel setuptools built, with its RECORD line: pip installs and uninstalls it like any other file.
Only the PEP 517/660 hooks of ``setuptools.build_meta`` are used; pyproject.toml names this
module (``backend-path``).
"""
from __future__ import annotations

import base64
import hashlib
import os
import zipfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (re-exported PEP 517/660 hooks)
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

PTH_NAME = "dlcompare_torchvision_guard.pth"
# Sorted after setuptools' "__editable__.dlcompare-*.pth" (site reads .pth files in name order),
# so that in an editable install the finder that maps the module to the checkout is in place.
PTH_LINE = b"import dlcompare_torchvision_guard\n"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    add_root_file(os.path.join(wheel_directory, name), PTH_NAME, PTH_LINE)
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_root_file(os.path.join(wheel_directory, name), PTH_NAME, PTH_LINE)
    return name


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def add_root_file(wheel_path: str, name: str, data: bytes) -> None:
    """Rewrite the wheel at ``wheel_path`` with ``name`` at its root and listed in its RECORD."""
    with zipfile.ZipFile(wheel_path) as src:
        infos = src.infolist()
        if any(info.filename == name for info in infos):
            return
        records = [info.filename for info in infos if info.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise RuntimeError(f"{wheel_path}: expected one .dist-info/RECORD, found {records}")
        contents = {info.filename: src.read(info) for info in infos}
    record = contents[records[0]].decode("utf-8")
    if record and not record.endswith("\n"):
        record += "\n"
    contents[records[0]] = (record + f"{name},{_record_hash(data)},{len(data)}\n").encode("utf-8")
    tmp_path = wheel_path + ".tmp"
    with zipfile.ZipFile(tmp_path, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in infos:
            if info.filename == records[0]:
                dst.writestr(_new_entry(name, info), data)  # before RECORD, which a wheel lists last
            dst.writestr(info, contents[info.filename])
    os.replace(tmp_path, wheel_path)


def _new_entry(name: str, like: zipfile.ZipInfo) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=like.date_time)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info
