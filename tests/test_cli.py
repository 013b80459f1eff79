"""Bad input: one line on stderr, exit code 2, nothing run."""
import os

import pytest

from conftest import run_cli


@pytest.mark.parametrize("args,message", [
    (["--backends", "inductor,nope"], "unknown backend 'nope'"),
    (["--workloads", "mlp,nope"], "unknown workload 'nope'"),
    (["--size", "huge"], "invalid choice: 'huge'"),
    (["--threads", "0"], "must be positive"),
    (["--threads", "two"], "is not an integer"),
    (["--timeout", "-5"], "must be a positive"),
    (["--timeout", "nan"], "must be a positive"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--bogus-flag"], "unrecognized arguments"),
    (["--workload-file", "/nonexistent/w.py"], "no such file"),
    (["report", "/nonexistent/run"], "no such file"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    proc = run_cli(*args, "--output-dir", tmp_path / "out") if args[0] != "report" else run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere; uses a file in the way instead")
def test_unwritable_output_dir_permissions(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    proc = run_cli("--workloads", "mlp", "--output-dir", locked / "run")
    assert proc.returncode == 2 and "not writable" in proc.stderr


def test_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")
    proc = run_cli("--workloads", "mlp", "--output-dir", blocker / "run")
    assert proc.returncode == 2
    assert "not writable" in proc.stderr and "Traceback" not in proc.stderr


def test_list_shows_workloads_and_backends():
    proc = run_cli("list")
    assert proc.returncode == 0
    for name in ("elementwise_chain", "norm_residual", "conv", "mlp", "attention", "eager", "inductor", "ort",
                 "resnet", "mobilenet_v2", "bert", "gpt2", "vit"):
        assert name in proc.stdout
    resnet_row = next(line for line in proc.stdout.splitlines() if "│ resnet " in line)
    assert "models" in resnet_row and "image: float32[1, 3, 224, 224]" in resnet_row and "batch=1" in resnet_row
    # the zoo's entries and the real decoders are listed too, each with its suite
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("│")}
    assert "zoo" in rows["resnet50"] and "zoo" in rows["deberta_v3"] and "llm" in rows["qwen2_decode"]


def test_noise_benchmark_prints_the_spread():
    proc = run_cli("noise", "--seconds", "1")
    assert proc.returncode == 0, proc.stderr
    assert "windows of 0.1 s" in proc.stdout and "per-second medians: fastest" in proc.stdout


@pytest.mark.unit
def test_noise_summary_arithmetic():
    from compare.experiments.noise import summary

    windows = [(i * 0.1, 1.0) for i in range(10)] + [(1.0 + i * 0.1, 1.5) for i in range(10)]
    result = summary(windows)  # median of all windows: 1.25
    assert result["per_second"] == pytest.approx([-0.2, 0.2])
    assert result["fastest_second"] == pytest.approx(-0.2) and result["slowest_second"] == pytest.approx(0.2)


@pytest.mark.unit
def test_every_subcommand_module_exists():
    import importlib

    from adapters import backend_subcommands
    from compare.cli import COMMANDS

    delegated = {name: cmd for name, cmd in COMMANDS.items() if hasattr(cmd, "module")}
    assert {"diff", "reference", "noise", "overhead"} <= set(delegated)
    for name, cmd in delegated.items():
        assert callable(getattr(importlib.import_module(cmd.module), cmd.entry)), name
    # a backend's own subcommand comes from its adapter: TVM's tuning logs
    brought = backend_subcommands()
    assert brought["tuning-logs"].__name__ == "adapters.tvm.logs_command"
    assert all(callable(m.add_parser) and callable(m.run) for m in brought.values())


@pytest.mark.unit
@pytest.mark.parametrize("flag, replacement", [("--system-malloc", "--allocator system"),
                                               ("--list", "python -m compare list")])
def test_a_flag_that_repeated_another_is_a_one_line_error_naming_it(flag, replacement, capsys):
    from compare import cli

    assert cli.main([flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag} is gone: use {replacement}" in err


@pytest.mark.unit
def test_run_help_prints_the_options_in_sections(capsys):
    from compare import cli

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "--help"])
    sections = [line.rstrip(":") for line in capsys.readouterr().out.splitlines() if line and not line[0].isspace()]
    assert sections[1:] == ["options", "selection", "execution", "sampling", "conditions", "outputs",
                            "instruments", "backend options"]
