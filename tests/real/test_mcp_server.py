"""`msoverflow mcp` as an agent meets it: a real stdio subprocess driven by the official SDK's client, over real
MindSpore dumps (the demo's NormHead overflow, a 2-rank msrun dump, an msprobe dump, the demo's fp32/fp16 compare
pair). Every answer is held against what the CLI's `--format json` says for the same input.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp", reason="the 'agent' extra is not installed (pip install 'msoverflow[agent]')")

import threading  # noqa: E402

import anyio  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from msoverflow.agent.tools import MAX_CHARS  # noqa: E402

MSOVERFLOW = [sys.executable, "-m", "msoverflow"]
TOOLS = {"analyze", "explain", "events", "compare", "config", "check_config", "patch_preview", "repro",
         "watch_status"}


def cli_json(*args, cwd=None) -> dict:
    done = subprocess.run([*MSOVERFLOW, *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env=dict(os.environ, MSOVERFLOW_REPORT_JSON=""))
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout)


def drive(body, roots, *extra, cwd=None):
    """Start `msoverflow mcp --root ...` as a subprocess and run `body(client)` against it; its return value."""
    args = ["-m", "msoverflow", "mcp", *[a for r in roots for a in ("--root", str(r))], *map(str, extra)]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(cwd or roots[0]),
                                   env={"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "MSOVERFLOW_REPORT_JSON": ""})
    out = {}

    async def main():
        async with Client(params, read_timeout_seconds=600) as client:
            out["value"] = await body(client)

    # in a thread of its own: an event loop another test left running in this one (playwright's sync API, alive
    # while the browser tests' session fixture is) makes anyio.run refuse
    failed = []

    def run():
        try:
            anyio.run(main)
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            failed.append(exc)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out["value"]


async def ok(client, name, **args) -> dict:
    result = await client.call_tool(name, args)
    text = result.content[0].text
    assert not result.is_error, f"{name}({args}): {text}"
    assert len(text) <= MAX_CHARS, f"{name}: {len(text)} characters, more than the ~8k-token budget"
    answer = json.loads(text)
    assert answer == result.structured_content
    assert isinstance(answer.get("next"), list), f"{name}: no next calls"
    return answer


async def error(client, name, **args) -> str:
    result = await client.call_tool(name, args)
    text = result.content[0].text
    assert result.is_error, f"{name}({args}) should fail: {text[:300]}"
    assert "\n" not in text and "Traceback" not in text, text
    assert text.startswith("msoverflow: error: ")
    return text


def source_root(report: dict) -> str:
    return os.path.dirname(report["first"]["source"]["file"])


@pytest.fixture(scope="module")
def demo(real_dumps):
    return real_dumps["normhead_fp16_overflow"].resolve()     # the server names files by their real paths


@pytest.fixture(scope="module")
def dp2():
    from tests.support import gen_real_dumps
    return gen_real_dumps.ensure_cases(["dp2_empty_loss_mask"], jobs=1)["dp2_empty_loss_mask"].resolve()


def snapshot(*dirs) -> dict:
    seen = {}
    for d in dirs:
        for base, subdirs, files in os.walk(d):
            for name in subdirs + files:
                p = os.path.join(base, name)
                st = os.lstat(p)
                seen[p] = (st.st_size, st.st_mtime_ns)
    return seen


def test_tools_listed_with_schemas_from_the_cli(tmp_path):
    async def body(client):
        return (await client.list_tools()).tools

    listed = {t.name: t for t in drive(body, [tmp_path])}
    assert set(listed) == TOOLS
    from msoverflow.cli import build_parser
    analyze_parser = build_parser(["analyze"])._subparsers._group_actions[0].choices["analyze"]
    ranks_help = next(a.help for a in analyze_parser._actions if a.dest == "ranks")
    assert ranks_help in listed["analyze"].input_schema["properties"]["ranks"]["description"]
    schema = json.loads(Path("msoverflow/schema/report.schema.json").read_text())
    assert listed["analyze"].output_schema["properties"]["verdict"]["enum"] == schema["properties"]["verdict"]["enum"]
    assert (listed["analyze"].output_schema["properties"]["first"]["properties"]["kind"]
            == schema["$defs"]["finding"]["properties"]["kind"])
    compare = json.loads(Path("msoverflow/schema/compare.schema.json").read_text())
    assert listed["compare"].output_schema["properties"]["verdict"] == compare["properties"]["verdict"]
    for tool in listed.values():          # written for an agent: when to call it and what it costs
        assert "Call" in tool.description and "Cost" in tool.description, tool.name


def test_demo_dump_every_tool_against_the_cli(demo, tmp_path):
    cli = cli_json("analyze", str(demo), "--format", "json")
    cli_first = cli["first"]
    report_file = tmp_path / "report.json"
    report_file.write_text(json.dumps(cli))
    roots = [demo.parent, source_root(cli), tmp_path]
    before = snapshot(demo.parent, source_root(cli))

    async def body(client):
        got = {}
        got["analyze"] = await ok(client, "analyze", path=str(demo))
        rid = got["analyze"]["report"]
        got["evidence"] = await ok(client, "explain", report=rid, part="evidence")
        got["ranks"] = await ok(client, "explain", report=rid, part="ranks")
        got["history"] = await ok(client, "explain", report=rid, part="history")
        got["page1"] = await ok(client, "explain", report=rid, part="propagation", per_page=2)
        got["page2"] = await ok(client, "explain", report=rid, part="propagation", page=2, per_page=2)
        got["events"] = await ok(client, "events", path=str(demo), limit=5)
        got["patch"] = await ok(client, "patch_preview", report=rid)
        got["patch_from_file"] = await ok(client, "patch_preview", report=str(report_file))
        got["repro"] = await ok(client, "repro", report=rid)
        got["config"] = await ok(client, "config", device="cpu", dump_path=str(tmp_path / "dumps"))
        got["watch"] = await ok(client, "watch_status", dir=str(demo))
        return got

    started = time.monotonic()
    got = drive(body, roots)
    assert time.monotonic() - started < 300
    answer = got["analyze"]
    assert answer["verdict"] == cli["verdict"] == "anomaly"
    first = answer["first"]
    for key in ("op_type", "op_name", "forward_op", "cell", "cell_type", "rank", "kind", "cause", "source", "role"):
        assert first[key] == cli_first[key], key
    assert first["step"] == cli_first["iteration"] and first["fix"] == cli_first["recommendation"]
    assert answer["dump_holds"]["ranks"] == cli["summary"]["ranks"]
    assert {c["tool"] for c in answer["next"]} >= {"explain", "patch_preview", "events"}
    assert got["evidence"]["value"]["evidence"] == cli_first["evidence"]
    assert got["ranks"]["items"] == cli["ranks"]
    assert got["history"]["value"] == cli_first["history"]
    # paging: two pages of two, in order, the total the CLI's report holds
    assert got["page1"]["total"] == len(cli["propagation"])
    assert got["page1"]["items"] + got["page2"]["items"] == cli["propagation"][:4]
    assert got["page1"]["next"][0]["args"]["page"] == 2
    # events: bounded rows; the origin's output is a bad tensor of its step
    events = got["events"]
    assert len(events["rows"]) == 5 and events["matched"] >= 5
    names = {row[3] for row in events["rows"]}
    assert cli_first["op_name"] in names
    assert events["next"][0]["args"]["offset"] == 5
    # patch_preview: the CLI's diff, not written
    patch = got["patch"]
    assert patch["written"] is False and patch["diff"].startswith("---")
    shown = subprocess.run([*MSOVERFLOW, "patch", "--from", str(report_file)], capture_output=True, text=True,
                           timeout=300)
    assert patch["diff"] in shown.stdout
    assert got["patch_from_file"]["diff"] == patch["diff"]
    # repro: the script `msoverflow repro` writes, and nothing kept
    repro = got["repro"]
    assert repro["written"] is None
    subprocess.run([*MSOVERFLOW, "repro", "--from", str(report_file), "-o", str(tmp_path / "repro")], check=True,
                   capture_output=True, timeout=300)
    assert repro["script_text"] == (tmp_path / "repro" / "repro.py").read_text()
    # config: the CLI's JSON config for the same platform
    config = cli_json("config", "--device", "cpu", "--path", str(tmp_path / "dumps"), "-o", "-", "--format", "json")
    assert got["config"]["config"] == config["config"] and got["config"]["env"] == config["env"]
    assert got["watch"]["found"] is False and "no watch" in got["watch"]["reason"]
    # nothing was written under the dump or the source
    assert snapshot(demo.parent, source_root(cli)) == before


def test_check_config_against_the_cli(tmp_path):
    config_file = tmp_path / "dump_config.json"
    made = subprocess.run([*MSOVERFLOW, "config", "--device", "cpu", "--path", "/tmp/x y", "-o", str(config_file)],
                          capture_output=True, text=True)
    if made.returncode != 0:      # a path MindSpore refuses: write one that is wrong on purpose
        config_file.write_text(json.dumps({"common_dump_settings": {"dump_mode": 0, "path": "relative/dir",
                                                                    "net_name": "Net", "iteration": "0",
                                                                    "saved_data": "tensor", "input_output": 0,
                                                                    "kernels": [], "support_device": [0]}}))
    cli = subprocess.run([*MSOVERFLOW, "config", "--check", str(config_file), "--device", "cpu", "--format", "json"],
                         capture_output=True, text=True)
    expected = json.loads(cli.stdout)

    async def body(client):
        return await ok(client, "check_config", path=str(config_file), device="cpu")

    got = drive(body, [tmp_path])
    assert got["ok"] == expected["ok"] and got["problems"] == expected["problems"]
    assert got["errors"] == expected["errors"] > 0


def test_multirank_dump_and_a_cause_that_no_patch_fixes(dp2):
    cli = cli_json("analyze", str(dp2), "--format", "json")

    async def body(client):
        answer = await ok(client, "analyze", path=str(dp2))
        ranks = await ok(client, "explain", report=answer["report"], part="ranks")
        patch = await ok(client, "patch_preview", report=answer["report"])
        unknown = await error(client, "analyze", path=str(dp2), ranks="7")
        return answer, ranks, patch, unknown

    answer, ranks, patch, unknown = drive(body, [dp2.parent])
    assert answer["verdict"] == cli["verdict"] == "anomaly"
    assert answer["first"]["rank"] == cli["first"]["rank"] and answer["first"]["op_type"] == cli["first"]["op_type"]
    assert [(r["rank"], r["status"]) for r in answer["ranks"]] == [(r["rank"], r["status"]) for r in cli["ranks"]]
    assert ranks["items"] == cli["ranks"]
    assert cli["first"]["cause"] == "data"
    assert "patch_preview" not in {c["tool"] for c in answer["next"]}     # the data cause: no precision patch
    # a 0/0 at a masked mean: the zero-token guard, as `msoverflow patch` decides, never a dtype change
    assert patch["patched"] is False and patch["how"] == "guard" and "diff" not in patch
    assert "it holds ranks 0" in unknown and "1" in unknown.split("it holds ranks")[1], unknown


def test_msprobe_dump_and_compare_pair(compare_pairs):
    msprobe = compare_pairs["msprobe_softmax_fp16"][1].resolve()
    baseline, target = (p.resolve() for p in compare_pairs["demo_fp16_vs_fp32"])
    cli_msprobe = cli_json("analyze", str(msprobe), "--format", "json")
    cli_compare = cli_json("compare", str(baseline), str(target), "--format", "json")

    async def body(client):
        analysed = await ok(client, "analyze", path=str(msprobe))
        compared = await ok(client, "compare", baseline=str(baseline), target=str(target))
        worst = await ok(client, "explain", report=compared["report"], part="worst", per_page=3)
        return analysed, compared, worst

    analysed, compared, worst = drive(body, [msprobe.parent.parent, baseline.parent.parent])
    assert analysed["verdict"] == cli_msprobe["verdict"]
    assert analysed["dump_holds"]["ranks"] == cli_msprobe["summary"]["ranks"]
    assert compared["verdict"] == cli_compare["verdict"] == "diverged"
    assert compared["first_divergence"] == cli_compare["first_divergence"]
    assert worst["items"] == cli_compare["worst"][:3]


def test_path_confinement(demo, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "link_out").symlink_to(demo)                    # a symlink inside the root, pointing out of it
    (root / "inside").mkdir()

    async def body(client):
        return [await error(client, "analyze", path=str(root / "inside" / ".." / ".." / demo.name)),
                await error(client, "analyze", path="../" + demo.name),
                await error(client, "analyze", path=str(root / "link_out")),
                await error(client, "events", path=str(demo)),
                await error(client, "check_config", path="/etc/passwd"),
                await error(client, "compare", baseline=str(root / "inside"), target="/"),
                await error(client, "watch_status", dir=str(root / "link_out"))]

    for text in drive(body, [root]):
        assert "outside the server's roots" in text and str(root) in text, text


def test_malformed_arguments_unknown_ids_and_bounds(demo, tmp_path):
    async def body(client):
        out = {}
        out["ranks_list"] = await error(client, "analyze", path=str(demo), ranks=[0, 1])
        out["path_int"] = await error(client, "analyze", path=3)
        out["limit_text"] = await error(client, "events", path=str(demo), limit="5")
        out["limit_huge"] = await error(client, "events", path=str(demo), limit=10**9)
        out["unknown_arg"] = await error(client, "analyze", path=str(demo), rank=0)
        out["unknown_rank"] = await error(client, "analyze", path=str(demo), ranks="5")
        out["unknown_step"] = await error(client, "analyze", path=str(demo), steps="9")
        out["huge_range"] = await error(client, "analyze", path=str(demo), ranks="1-2000000000")
        out["over_grammar"] = await error(client, "analyze", path=str(demo), ranks="1-99999999999")
        out["bad_grammar"] = await error(client, "events", path=str(demo), steps="0-x")
        out["no_report"] = await error(client, "explain", report="r9", part="evidence")
        analysed = await ok(client, "analyze", path=str(demo))
        out["bad_part"] = await error(client, "explain", report=analysed["report"], part="nonsense")
        out["past_end"] = await error(client, "explain", report=analysed["report"], part="ranks", page=50)
        out["no_tool"] = await error(client, "delete_everything")
        return out

    out = drive(body, [demo.parent])
    assert "ranks must be string or integer, not list" in out["ranks_list"]
    assert "path must be string, not int" in out["path_int"]
    assert "limit must be integer, not str" in out["limit_text"]
    assert "out of range" in out["limit_huge"]
    assert "unknown argument 'rank'" in out["unknown_arg"]
    for key in ("unknown_rank", "unknown_step", "huge_range"):
        assert "it holds ranks 0" in out[key] and "steps 0" in out[key], out[key]
    assert "expected numbers like" in out["bad_grammar"] and "expected numbers like" in out["over_grammar"]
    assert "no report 'r9'" in out["no_report"] and "none yet" in out["no_report"]
    assert "is not one of evidence" in out["bad_part"]
    assert "past the end" in out["past_end"]
    assert "no tool 'delete_everything'" in out["no_tool"] or "delete_everything" in out["no_tool"]


def test_time_limit_stops_a_call_with_one_line(demo):
    async def body(client):
        started = time.monotonic()
        text = await error(client, "analyze", path=str(demo))
        return text, time.monotonic() - started

    text, took = drive(body, [demo.parent], "--timeout", "0.3")
    assert "time limit (0.3 s, --timeout)" in text
    assert took < 30


def test_memory_limit_stops_a_call_with_one_line(demo):
    async def body(client):
        return await error(client, "analyze", path=str(demo))

    text = drive(body, [demo.parent], "--memory-mb", "1")
    assert "memory limit (1 MB, --memory-mb)" in text


def test_writes_only_with_allow_write(demo, tmp_path):
    cli = cli_json("analyze", str(demo), "--format", "json")
    out = tmp_path / "out"
    out.mkdir()
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    roots = [demo.parent, source_root(cli), workdir]
    before = snapshot(demo.parent, source_root(cli), tmp_path)

    async def without(client):
        answer = await ok(client, "analyze", path=str(demo))
        await ok(client, "repro", report=answer["report"])
        await ok(client, "patch_preview", report=answer["report"])
        await ok(client, "config", device="cpu", dump_path=str(workdir / "new_dump"))
        return answer

    drive(without, roots, cwd=workdir)
    assert snapshot(demo.parent, source_root(cli), tmp_path) == before

    async def allowed(client):
        answer = await ok(client, "analyze", path=str(demo))
        return await ok(client, "repro", report=answer["report"])

    written = drive(allowed, roots, "--allow-write", out, cwd=workdir)
    assert written["written"] and Path(written["written"], "repro.py").read_text() == written["script_text"]
    assert Path(written["written"]).parent == out
    assert snapshot(demo.parent, source_root(cli)) == {k: v for k, v in before.items()
                                                        if not k.startswith(str(tmp_path))}


def _cached_watch_run(case):
    """A real `msoverflow watch` run made by the watch branch's generator (tests/support/gen_watch_runs.py there),
    when the shared fixture cache holds one: that branch is not merged into this one."""
    root = Path(__file__).resolve().parents[2] / ".fixture-cache" / "watch"
    runs = sorted(root.glob(f"*/{case}/out"), key=lambda p: p.stat().st_mtime)
    if not runs:
        pytest.skip("no cached `msoverflow watch` run (msoverflow watch is built on its own branch)")
    return runs[-1].resolve()


def test_watch_status_on_a_real_watch_run_and_its_event_dump(tmp_path):
    out = _cached_watch_run("fp16_growth")
    lines = [json.loads(x) for x in (out / "watch_events.jsonl").read_text().splitlines() if x.strip()]
    steps = sorted(int(p.name) for p in (out / "stats" / "rank_0").glob("*/*/*") if p.name.isdigit())

    async def body(client):
        status = await ok(client, "watch_status", dir=str(out))
        analysed = [await ok(client, c["tool"], **c["args"]) for c in status["next"] if c["tool"] == "analyze"]
        empty = await ok(client, "watch_status", dir=str(tmp_path))
        return status, analysed, empty

    status, analysed, empty = drive(body, [out, tmp_path])
    assert status["found"] is True
    assert status["events_total"] == len(lines)
    assert status["events_last"][-1]["kind"] == lines[-1]["kind"] and status["events_last"][-1]["step"] == \
        lines[-1]["step"]
    assert status["steps_on_disk"]["0"] == {"count": len(steps), "first": steps[0], "last": steps[-1]}
    dumps = sorted(out.glob("dump_step*"))
    assert [d["path"] for d in status["event_dumps"]] == [str(d) for d in dumps]
    assert analysed                       # the event step's dump, handed on to analyze
    for answer, dump in zip(analysed, dumps[:2], strict=True):
        assert answer["verdict"] == cli_json("analyze", str(dump), "--format", "json")["verdict"]
    assert empty["found"] is False and "no watch found" in empty["reason"]


def test_events_pages_stay_in_budget_and_add_up_to_the_dump(demo):
    from msoverflow import api
    frame = api.events(str(demo))

    async def body(client):
        pages, args = [], {"path": str(demo), "bad_only": False, "limit": 200}
        while True:
            page = await ok(client, "events", **args)      # ok() holds every answer to the ~8k-token budget
            pages.append(page)
            more = [c for c in page["next"] if c["tool"] == "events" and "offset" in c["args"]
                    and c["args"].get("bad_only") is False and c["args"]["offset"] > args.get("offset", 0)]
            if not more:
                return pages
            args = more[0]["args"]

    pages = drive(body, [demo.parent])
    assert len(pages) > 1 and len(pages[0]["rows"]) < 200          # 200 rows of this dump exceed the budget
    rows = [tuple(json.dumps(r) for r in row) for page in pages for row in page["rows"]]
    assert len(rows) == len(frame) == pages[0]["matched"] == pages[0]["events_in_selection"]
    assert len(set(rows)) == len(rows)                              # no row twice, none skipped
    assert [r[3] for r in rows] == [json.dumps(n) for n in frame["op_name"]]
