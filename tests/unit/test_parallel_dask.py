"""The per-rank scans on a real dask.distributed LocalCluster (worker processes, loopback only) give the same
report as in one process; later steps of a rank whose answer came are never handed out, on any executor."""
import json
import os
from concurrent.futures import Future

import pytest

from msoverflow import parallel
from msoverflow.analysis import analyze
from msoverflow.report_dict import report_dict
from msoverflow.walk import Unit, UnitSummary
from tests.unit.test_one_walk import _rules_dump, _statistic_dump

# CI installs the `dask` extra (scripts/bootstrap.sh): there a missing dask.distributed fails; elsewhere it skips.
if os.environ.get("CI"):
    import distributed
else:
    distributed = pytest.importorskip("distributed")


def _json(report):
    data = report_dict(report)
    data["warnings"] = sorted(data.get("warnings", []))
    return json.dumps(data, sort_keys=True, default=str)


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=40) as local:
        yield local


@pytest.mark.parametrize("scan_all", [False, True])
def test_dask_cluster_gives_the_in_process_report(tmp_path, cluster, scan_all):
    _rules_dump(str(tmp_path))
    here = analyze(str(tmp_path), progress=False, jobs=1, scan_all=scan_all)
    there = analyze(str(tmp_path), progress=False, scheduler=cluster.scheduler_address, scan_all=scan_all)
    assert there.first is not None and there.verdict == "anomaly"
    assert _json(there) == _json(here)


def test_dask_cluster_statistic_csv_and_scheduler_from_the_environment(tmp_path, cluster, monkeypatch, capsys):
    from msoverflow.cli import main
    _statistic_dump(str(tmp_path), ranks=4)
    here = analyze(str(tmp_path), progress=False, jobs=1)
    monkeypatch.setenv(parallel.SCHEDULER_ENV, cluster.scheduler_address)
    assert main(["analyze", str(tmp_path), "--format", "json", "--no-progress"]) == 1
    there = json.loads(capsys.readouterr().out)
    assert there["first"] == json.loads(_json(here))["first"]
    assert there["first"]["rank"] == 3 and there["summary"]["tensors_read"] == 0


def test_unreachable_scheduler_is_a_usage_error(tmp_path, capsys):
    from msoverflow.cli import main
    _statistic_dump(str(tmp_path), ranks=1)
    assert main(["analyze", str(tmp_path), "--scheduler", "tcp://127.0.0.1:9", "--no-progress"]) == 2
    assert "cannot reach the Dask scheduler" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path), "--scheduler", "localhost", "--no-progress"]) == 2
    assert "expected a scheduler address" in capsys.readouterr().err


def test_a_rank_stops_after_the_step_of_its_origin_on_every_executor():
    """_chained with an executor that records what it was handed: rank 0 holds an origin in step 1, so its
    step 2 is never submitted; rank 1 has none and is scanned to the end."""
    chains = {r: [Unit(r, i, []) for i in range(3)] for r in (0, 1)}
    handed = []

    def submit(unit, earlier_bad):
        handed.append((unit.rank, unit.iteration, earlier_bad))
        future = Future()
        future.set_result(UnitSummary(unit.rank, unit.iteration, has_origin=(unit.rank, unit.iteration) == (0, 1),
                                      earlier_bad=unit.iteration >= 1))
        return future

    summaries, scanned_all = parallel._chained(chains, lambda summary: summary.has_origin, submit,
                                               lambda futures: futures[:1], lambda n: None)
    assert sorted(handed) == [(0, 0, False), (0, 1, False), (1, 0, False), (1, 1, False), (1, 2, True)]
    assert not scanned_all and len(summaries) == 5


@pytest.mark.parametrize("garbage", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\xff" * 64, b"\x10" + b"\0" * 7 + b"\xff" * 8])
def test_a_peer_that_answers_garbage_is_one_line_and_exit_2(tmp_path, garbage):
    """A loopback server that writes garbage to every connection (an HTTP request line: its first 8 bytes read as
    a Dask frame length of about 5 EiB; all ones; a sane length then an absurd frame count)."""
    import socket
    import subprocess
    import sys
    import threading
    _statistic_dump(str(tmp_path / "dump"), ranks=1)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(60)

    def serve():
        try:
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(garbage)
        except OSError:
            return

    threading.Thread(target=serve, daemon=True).start()
    try:
        run = subprocess.run([sys.executable, "-m", "msoverflow", "analyze", str(tmp_path / "dump"), "--scheduler",
                              f"tcp://127.0.0.1:{server.getsockname()[1]}", "--no-progress"],
                             capture_output=True, text=True, timeout=120)
    finally:
        server.close()
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Dask scheduler" in lines[0], run.stderr
    assert "Traceback" not in run.stderr and "MemoryError" not in run.stderr
