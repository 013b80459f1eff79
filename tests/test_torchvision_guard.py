"""The torchvision guard at interpreter start (issue 57): in the venv the README installs (torch
2.13.0+cpu beside the registry's CUDA build of torchvision 0.28.0), user code imports timm and
builds a transformers config without "operator torchvision::nms does not exist", because the
installed dlcompare_torchvision_guard.pth applies the guard in every interpreter."""
import base64
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import zipfile

import pytest

import dlcompare_torchvision_guard as guard
from conftest import ROOT

HAVE_ZOO = all(importlib.util.find_spec(m) for m in ("transformers", "timm", "torchvision"))
USER_CODE = "import timm; import transformers; transformers.LlamaConfig(); import torchvision; print('ok')"


def _fresh_interpreter(code: str, cwd, **env_overrides):
    """``code`` in a fresh interpreter of this venv, from a directory outside the checkout and
    with no PYTHONPATH: only what is installed in the venv (its .pth files) can apply a guard."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", guard.DISABLE_ENV)}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **env_overrides)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


@pytest.mark.skipif(not HAVE_ZOO, reason="the [zoo] extra is not installed")
def test_user_code_imports_timm_and_transformers_in_a_fresh_interpreter(tmp_path):
    proc = _fresh_interpreter(USER_CODE, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


@pytest.mark.skipif(not HAVE_ZOO, reason="the [zoo] extra is not installed")
def test_the_guard_is_what_makes_it_work(tmp_path):
    """Where this venv has the CPU torch / CUDA torchvision pair, the same code fails with the
    guard turned off: the test above passes because of the guard, not by luck."""
    if not guard.needs_guard(guard.installed_version("torch"), guard.installed_version("torchvision")):
        pytest.skip("this venv's torch and torchvision load together without the guard")
    proc = _fresh_interpreter(USER_CODE, tmp_path, **{guard.DISABLE_ENV: "0"})
    assert proc.returncode != 0
    assert "torchvision::nms does not exist" in proc.stderr


# -- the decision, on fake version files --------------------------------------------------------

def _fake_packages(root, torch=None, torchvision=None):
    for name, version in (("torch", torch), ("torchvision", torchvision)):
        if version is not None:
            (root / name).mkdir()
            (root / name / "__init__.py").write_text("raise ImportError('the guard must not import me')\n")
            (root / name / "version.py").write_text(f"from typing import Optional\n__version__ = '{version}'\ngit_version = 'abc'\n")


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """find_spec sees only the fake packages under tmp_path; the stand-in is not in sys.modules."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: importlib.machinery.PathFinder.find_spec(name, [str(tmp_path)]))
    monkeypatch.delitem(sys.modules, guard.STAND_IN, raising=False)
    monkeypatch.delenv(guard.DISABLE_ENV, raising=False)
    return tmp_path


@pytest.mark.unit
@pytest.mark.parametrize("torch_version, torchvision_version, acts", [
    ("2.13.0+cpu", "0.28.0+cu130", True),
    ("2.13.0+cpu", "0.28.0+cu126", True),
    ("2.13.0+cpu", "0.28.0+cpu", False),   # a matching CPU build loads its ops
    ("2.13.0+cu130", "0.28.0+cu130", False),  # a CUDA torch loads them too
    ("2.13.0", "0.28.0+cu130", False),  # not a CPU build of torch
    ("2.13.0+cpu", None, False),  # no torchvision
    (None, "0.28.0+cu130", False),  # no torch
])
def test_acts_only_for_a_cpu_torch_beside_a_cuda_torchvision(fake_site, torch_version, torchvision_version, acts):
    _fake_packages(fake_site, torch_version, torchvision_version)
    assert guard.installed_version("torch") == torch_version
    assert guard.installed_version("torchvision") == torchvision_version
    assert guard.needs_guard(torch_version, torchvision_version) is acts
    assert guard.apply() is acts
    assert (guard.STAND_IN in sys.modules) is acts  # and nothing imported: the fakes' __init__ raises


@pytest.mark.unit
def test_a_given_torch_version_wins_and_the_switch_turns_it_off(fake_site, monkeypatch):
    _fake_packages(fake_site, "2.13.0+cu130", "0.28.0+cu130")
    assert guard.apply("2.13.0+cpu") is True  # torch.__version__ of an imported torch
    monkeypatch.delitem(sys.modules, guard.STAND_IN)
    monkeypatch.setenv(guard.DISABLE_ENV, "0")
    assert guard.apply("2.13.0+cpu") is False
    assert guard.STAND_IN not in sys.modules


@pytest.mark.unit
def test_a_present_stand_in_or_module_is_kept(fake_site, monkeypatch):
    _fake_packages(fake_site, "2.13.0+cpu", "0.28.0+cu130")
    existing = object()
    monkeypatch.setitem(sys.modules, guard.STAND_IN, existing)
    assert guard.apply() is True
    assert sys.modules[guard.STAND_IN] is existing


@pytest.mark.unit
def test_unreadable_version_files_and_errors_never_raise_at_start(fake_site, monkeypatch):
    _fake_packages(fake_site, "2.13.0+cpu", "0.28.0+cu130")
    (fake_site / "torchvision" / "version.py").unlink()
    assert guard.apply() is False
    assert guard.read_version(str(fake_site / "missing.py")) is None

    def broken(name):
        raise ValueError("a broken finder")

    monkeypatch.setattr(importlib.util, "find_spec", broken)
    guard._at_start()  # what the .pth runs: swallows it


@pytest.mark.unit
def test_the_shipped_guard_is_the_zoo_one(fake_site):
    from workloads.zoo import guard_torchvision

    _fake_packages(fake_site, "2.13.0+cpu", "0.28.0+cu130")
    assert guard_torchvision("2.13.0+cpu") is True
    assert guard_torchvision("2.13.0+cu130") is False


# -- the build backend that ships the .pth ------------------------------------------------------

@pytest.mark.unit
def test_backend_adds_the_pth_to_a_wheel_with_its_record_line(tmp_path):
    spec = importlib.util.spec_from_file_location("dlcompare_build", ROOT / "build_backend" / "dlcompare_build.py")
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    wheel = tmp_path / "demo-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("demo.py", "x = 1\n")
        zf.writestr("demo-0.1.dist-info/METADATA", "Name: demo\n")
        zf.writestr("demo-0.1.dist-info/RECORD", "demo.py,sha256=abc,6\ndemo-0.1.dist-info/METADATA,,\ndemo-0.1.dist-info/RECORD,,\n")
    backend.add_root_file(str(wheel), backend.PTH_NAME, backend.PTH_LINE)
    backend.add_root_file(str(wheel), backend.PTH_NAME, backend.PTH_LINE)  # once only
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert names.count(backend.PTH_NAME) == 1 and names[-1].endswith("RECORD")
        assert zf.read(backend.PTH_NAME) == b"import dlcompare_torchvision_guard\n"
        record = zf.read("demo-0.1.dist-info/RECORD").decode().splitlines()
    digest = base64.urlsafe_b64encode(hashlib.sha256(backend.PTH_LINE).digest()).rstrip(b"=").decode()
    assert f"{backend.PTH_NAME},sha256={digest},{len(backend.PTH_LINE)}" in record
    # site reads .pth files in name order: after setuptools' editable finder is installed
    assert sorted([backend.PTH_NAME, "__editable__.dlcompare-0.1.0.pth"])[-1] == backend.PTH_NAME
