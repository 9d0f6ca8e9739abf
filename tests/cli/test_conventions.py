"""Conventions every verb keeps: -h, examples in help, defaults shown one way, --json errors,
NO_COLOR, -v/-q, shell completion."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner
from clitree import walk

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main

VISIBLE = [(p, c) for p, c in walk() if not getattr(c, "hidden", False)]
LEAVES = [(p, c) for p, c in VISIBLE if p and not isinstance(c, click.Group)]


def run(*args: str, env: dict | None = None, color: bool = False):
    return CliRunner().invoke(main, list(args), env=env, color=color, catch_exceptions=False)


@pytest.mark.parametrize("path", [" ".join(p) or "(root)" for p, _ in VISIBLE])
def test_dash_h_works_everywhere(path):
    args = [] if path == "(root)" else path.split()
    res = run(*args, "-h")
    assert res.exit_code == 0, res.output
    assert "Usage:" in res.output and "-h, --help" in res.output


@pytest.mark.parametrize("path", [" ".join(p) for p, _ in LEAVES])
def test_every_verb_help_has_examples(path):
    res = run(*path.split(), "--help")
    text = res.output
    assert "Examples:" in text, f"`sparkfleet {path} --help` shows no examples"
    examples = text.split("Examples:", 1)[1]
    assert f"sparkfleet {path}" in examples, f"examples of {path} never run `sparkfleet {path}`"


ODD_DEFAULT = re.compile(r"\(default|\bdefault:|\[\d[^\]]*\]|\bdefaults? (is|to)\b", re.IGNORECASE)


def test_defaults_are_shown_one_way():
    """Only click's `[default: …]` (show_default, a string where the default is computed)."""
    odd = []
    for path, cmd in walk():
        for p in cmd.params:
            if isinstance(p, click.Option) and p.help and ODD_DEFAULT.search(p.help):
                odd.append(f"sparkfleet {' '.join(path)} {p.opts[-1]}: {p.help}")
    assert odd == []
    text = " ".join(run("stage", "--help").output.split())
    assert "Parallel copy workers. [default: 4; 1<=x<=64]" in text  # through the group's show_default
    assert "Free space to leave. [default: (the host's reserve_gib)]" in text


def test_json_error_is_a_json_object_on_stdout(tmp_path):
    res = CliRunner().invoke(main, ["--root", str(tmp_path), "status", "nolane", "--json"])
    assert res.exit_code == ExitCode.USAGE
    doc = json.loads(res.stdout)
    assert set(doc) == {"error", "hint", "code"} and doc["code"] == ExitCode.USAGE
    assert "fleet.toml" in doc["error"]
    # a missing LANE is click's usage error
    usage = CliRunner().invoke(main, ["status", "--json"], prog_name="sparkfleet")
    doc = json.loads(usage.stdout)
    assert usage.exit_code == doc["code"] == ExitCode.USAGE and "LANE" in doc["error"]
    assert doc["hint"] == "sparkfleet status --help"
    plain = CliRunner().invoke(main, ["--root", str(tmp_path), "status", "nolane"])
    assert plain.stdout == "" and plain.stderr.startswith("error: ")


def test_no_color_is_honoured(tmp_path):
    args = ["--root", str(tmp_path), "status", "nolane"]
    colored = CliRunner().invoke(main, args, color=True)
    assert "\x1b[" in colored.stderr  # the control: errors are red on a colour terminal
    plain = CliRunner().invoke(main, args, color=True, env={"NO_COLOR": "1"})
    assert "\x1b[" not in plain.stderr and plain.stderr.startswith("error: ")


def test_verbose_shows_host_commands_and_quiet_hides_step_lines(tmp_path, monkeypatch):
    import logging

    from sparkfleet.cli import progress

    logger = logging.getLogger("sparkfleet")
    handlers = list(logger.handlers)
    try:
        res = CliRunner().invoke(main, ["-v", "--root", str(tmp_path), "status", "nolane"])
        assert logging.getLogger("sparkfleet").level == logging.INFO
    finally:
        logger.handlers[:] = handlers
        logger.setLevel(logging.NOTSET)
    assert res.exit_code == ExitCode.USAGE

    @click.command()
    def probe() -> None:
        progress.step_line("a step")
        click.echo("a result")

    main.add_command(probe, "zz-probe")
    try:
        loud = CliRunner().invoke(main, ["zz-probe"])
        quiet = CliRunner().invoke(main, ["-q", "zz-probe"])
    finally:
        main.commands.pop("zz-probe")
    assert "· a step" in loud.stderr and "a result" in loud.stdout
    assert quiet.stderr == "" and quiet.stdout == "a result\n"


def test_verbose_logs_each_host_command(caplog):
    from sparkfleet.remote.hosts import LocalHost

    with caplog.at_level("INFO", logger="sparkfleet"):
        LocalHost("spark").run(["true", "a b"])
        with LocalHost("spark").stream(["echo", "streamed"]) as lines:
            assert list(lines) == ["streamed\n"]
    assert "spark$ true 'a b'" in caplog.text and "spark$ echo streamed" in caplog.text


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_is_documented_and_generated(shell):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()  # linked from README
    assert f"_SPARKFLEET_COMPLETE={shell}_source sparkfleet" in readme
    env = {**os.environ, "_SPARKFLEET_COMPLETE": f"{shell}_source"}
    out = subprocess.run(
        [sys.executable, "-c", "from sparkfleet.cli import main; main(prog_name='sparkfleet')"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and "_SPARKFLEET_COMPLETE" in out.stdout


def test_completion_offers_the_fleets_lanes_and_hosts():
    """What `sparkfleet launch <TAB>` and `sparkfleet env LANE <TAB>` offer: the inventory's names."""
    from pathlib import Path

    from click.shell_completion import ShellComplete

    repo = str(Path(__file__).resolve().parents[2])

    def offered(*words: str, incomplete: str = "") -> list[str]:
        comp = ShellComplete(main, {}, "sparkfleet", "_SPARKFLEET_COMPLETE")
        return [c.value for c in comp.get_completions(["--root", repo, *words], incomplete)]

    assert offered("launch", incomplete="dsv41") == [
        "dsv41-flash-4x-aiden", "dsv41-flash-4x-mia", "dsv41-flash-exl3-2x"
    ]  # fmt: skip
    assert offered("env", "dsv41-flash-4x-mia", incomplete="dgx") == ["dgx1", "dgx2", "dgx3", "dgx4"]
    assert "dgx3" in offered("doctor") and "dsv41-flash-exl3-2x" in offered("doctor")
    assert offered("stage", incomplete="dgx4") == ["dgx4"]
    assert offered("--root", "/nonexistent", "launch") == []  # no inventory: nothing, no error


# Verbs another helper gives --json in the same round; non-strict, so their merge turns these into
# plain passes (then the entry goes).


@pytest.mark.parametrize(
    "path",
    [" ".join(p) for p, _ in LEAVES],
)
def test_every_verb_that_reports_takes_json(path):
    """Every verb reports something (a result, a state, what it changed), so every verb takes --json:
    `inventory show --json` was refused while it printed JSON anyway, and `demo` had none."""
    cmd = dict((" ".join(p), c) for p, c in LEAVES)[path]
    assert "--json" in {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts}


def test_inventory_show_is_text_for_people_and_json_with_json():
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    text = run("--root", root, "inventory", "show")
    assert text.exit_code == 0 and "hosts:" in text.output and "lanes:" in text.output
    assert "  dsv41-flash-exl3-2x: dgx1, dgx2" in text.output
    doc = json.loads(run("--root", root, "inventory", "show", "--json").output)
    assert set(doc) == {"hosts", "pins", "lanes"}
    assert doc["lanes"]["dsv41-flash-exl3-2x"]["hosts"] == ["dgx1", "dgx2"]


def test_the_root_help_reads_as_written():
    """The exit-code line appended to the root's help undid click's dedent: every paragraph after
    the first came out indented by the source's four spaces more."""
    text = run("--help").output
    assert "\n  Examples:\n    sparkfleet --root .demo/fleet doctor demo-exl3-2x\n" in text
    assert "\n  Exit codes: 0 ok, 1 shortfall" in text
