"""`nix run .#bench` runs sparkfleet with the flake source (a read-only store path) as its fleet root:
the report must go to `--out`, and a read-only reports folder is refused before the bench runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from bench_fleet import write_fleet_root

QUICK = ["--quick", "--depths", "0", "--concurrency", "1", "--requests", "1"]


def sparkfleet(*args: str, root: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "sparkfleet", "--root", str(root), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.fixture
def read_only_root(tmpfs, tmp_path):
    """A fleet root on a tmpfs remounted read-only (EROFS, like /nix/store)."""
    mnt = tmpfs(8 * 1024 * 1024)

    def make(port: int) -> tuple[Path, str]:
        name = write_fleet_root(mnt, port)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        return mnt, name

    yield make
    subprocess.run(["mount", "-o", "remount,rw", str(mnt)], capture_output=True)


def test_a_read_only_reports_folder_is_refused_before_the_bench_and_out_is_used(
    fake_lane, read_only_root, tmp_path
):
    lane = fake_lane()
    root, name = read_only_root(lane.port)
    refused = sparkfleet("bench", name, *QUICK, root=root)
    assert refused.returncode == 2, refused.stderr
    assert "is read-only" in refused.stderr and "--out" in refused.stderr
    assert "Traceback" not in refused.stderr and "warmup" not in refused.stderr  # refused before any request

    out = tmp_path / "reports"
    done = sparkfleet("bench", name, *QUICK, "--out", str(out), root=root)
    assert done.returncode == 0, done.stderr
    assert len(list(out.glob("*.json"))) == 1


def test_a_store_path_root_is_refused(tmp_path, monkeypatch):
    from sparkfleet.base.errors import SparkfleetError
    from sparkfleet.bench.session import writable_reports_dir

    with pytest.raises(SparkfleetError, match="inside the Nix store"):
        writable_reports_dir(Path("/nix/store/0123456789abcdfghijklmnpqrsvwxyz-source/recipes/x/reports"))
    ok = tmp_path / "new" / "reports"
    assert writable_reports_dir(ok) == ok and not ok.exists()  # creates nothing
