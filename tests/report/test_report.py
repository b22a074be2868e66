"""The report of real jobs in headless Chromium: it loads with no console error, shows summary.json's numbers and
every rollout's turns, and compares two jobs side by side."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agentbake.report.render import REPORT_FILE, report_html
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.job import SUMMARY_FILE, Job, JobBackend, JobConfig, JobTask
from agentbake.runner.result import RolloutResult
from agentbake.runner.runner_config import RunnerConfig
from tests.report.browser import Browser
from tests.report.conftest import SETUP_FAILURE
from tests.runner.cli.test_commands import agentbake

pytestmark = pytest.mark.docker
WIDTH, HEIGHT = 1280, 900


def shown(value: Any) -> str:
    """A number as the page prints it (report.js `fmt`)."""
    if value is None:
        return "\u2013"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser(WIDTH, HEIGHT) as browser:
        yield browser


def check_screenshot(browser: Browser) -> None:
    image = Image.open(io.BytesIO(browser.screenshot()))
    assert image.size == (WIDTH, HEIGHT)
    colors = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colors is None or len(colors) > 20, "the screenshot is blank"


def cards(browser: Browser, job: int = 0) -> dict[str, tuple[Any, str]]:
    found = browser.evaluate(
        f"[...document.querySelectorAll('.card[data-job=\"{job}\"]')]"
        ".map(c => [c.dataset.key, c.dataset.value, c.querySelector('.value').textContent])"
    )
    return {key: (json.loads(value), text) for key, value, text in found}


def test_rollout_writes_the_report_and_says_where(job_a: tuple[Path, str]) -> None:
    job, stderr = job_a
    assert f"report: {job / REPORT_FILE}" in stderr.replace("\n", "")
    assert (job / REPORT_FILE).read_text() == report_html([job])  # same jobs, same bytes


def test_the_overview_shows_summary_json(job_a: tuple[Path, str], browser: Browser) -> None:
    job, _ = job_a
    summary = json.loads((job / SUMMARY_FILE).read_text())
    browser.open(job / REPORT_FILE)
    expected = {
        "finished": summary["finished"],
        "total": summary["total"],
        **{key: summary["summary"][key] for key in ("reward_mean", "rollouts", "turns", "tokens")},
        "calls_without_token_ids": summary["summary"]["calls_without_token_ids"],
    }
    assert cards(browser) == {key: (value, shown(value)) for key, value in expected.items()}
    statuses = browser.evaluate(
        "[...document.querySelectorAll('table.statuses tr')].map(r => [r.dataset.status, r.cells[1].textContent])"
    )
    assert dict(statuses) == {status: str(n) for status, n in summary["summary"]["statuses"].items()}
    assert summary["summary"]["statuses"] == {"ok": 2, "setup_error": 2}
    phases = browser.evaluate(
        "[...document.querySelectorAll('table.phases tr[data-phase]')]"
        ".map(r => [r.dataset.phase, JSON.parse(r.cells[1].dataset.value), JSON.parse(r.cells[2].dataset.value)])"
    )
    assert {name: {"p50": p50, "p95": p95} for name, p50, p95 in phases} == summary["summary"]["phases"]
    assert browser.evaluate("document.querySelectorAll('.heatmap rect.cell').length") == summary["finished"]
    failures = browser.evaluate("[...document.querySelectorAll('.failure')].map(f => f.textContent)")
    assert len(failures) == 1 and "setup_error \u00d7 2" in failures[0] and SETUP_FAILURE in failures[0]
    table = browser.evaluate(
        "[...document.querySelectorAll('table.rollouts tbody tr')].map(r => r.cells[0].textContent)"
    )
    assert table == [rollout["folder"] for rollout in summary["rollouts"]]
    check_screenshot(browser)
    assert browser.errors == []


def test_each_rollout_page_shows_its_turns(job_a: tuple[Path, str], browser: Browser) -> None:
    job, _ = job_a
    summary = json.loads((job / SUMMARY_FILE).read_text())
    browser.open(job / REPORT_FILE)
    for index, rollout in enumerate(summary["rollouts"]):
        result = RolloutResult.read(job / rollout["folder"])
        browser.go(f"#rollout/0/{index}")
        assert browser.evaluate("document.body.dataset.view") == "rollout"
        assert {key: value for key, (value, _) in cards(browser, -1).items()} == {}  # the job's cards are gone
        page = browser.evaluate("document.getElementById('view').textContent")
        assert f"{rollout['task']} #{rollout['attempt']}" in page and result.rollout_id in page
        assert browser.evaluate("document.querySelectorAll('.turn').length") == result.turns
        if result.status.value == "setup_error":
            assert SETUP_FAILURE in page and "no model call recorded" in page
            continue
        assert result.turns >= 2
        assert browser.evaluate("document.querySelectorAll('.turn .sparkline').length") == result.turns
        assert "Done: ran the reference solution of write-file" in page  # the last completion
        assert "tool call Bash" in page
        assert (
            browser.evaluate("document.querySelector('pre.diff').textContent")
            == (job / rollout["folder"] / "workdir.diff").read_text()
        )
        stdout = (job / rollout["folder"] / "verifier" / "stdout.txt").read_text()
        assert browser.evaluate("document.querySelector('pre.verifier-stdout').textContent") == stdout
    browser.go("#rollout/0/0")
    check_screenshot(browser)
    assert browser.errors == []


def test_two_jobs_side_by_side(job_a: tuple[Path, str], job_b: Path, browser: Browser, tmp_path: Path) -> None:
    job, _ = job_a
    done = agentbake("report", str(job), str(job_b), "-o", str(tmp_path / "ab.html"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "ab.html")
    browser.open(tmp_path / "ab.html")
    rows = browser.evaluate(
        "[...document.querySelectorAll('table.compare tr[data-key]')]"
        ".map(r => [r.dataset.key, JSON.parse(r.cells[1].dataset.value), JSON.parse(r.cells[2].dataset.value)])"
    )
    a, b = (json.loads((folder / SUMMARY_FILE).read_text()) for folder in (job, job_b))
    compared = {key: (va, vb) for key, va, vb in rows}
    assert compared["reward_mean"] == (a["summary"]["reward_mean"], b["summary"]["reward_mean"])
    assert compared["finished"] == (a["finished"], b["finished"]) == (4, 2)
    assert compared["status.setup_error"] == (2, 1)
    assert compared["phases.total.p50"] == (
        a["summary"]["phases"]["total"]["p50"],
        b["summary"]["phases"]["total"]["p50"],
    )
    tasks = browser.evaluate(
        "[...document.querySelectorAll('table.compare-tasks tr[data-key]')]"
        ".map(r => [r.dataset.key, r.cells[1].textContent, r.cells[2].textContent, r.cells[3].textContent])"
    )
    assert tasks == [["task.broken-setup", "0", "0", "0"], ["task.write-file", "1", "1", "0"]]
    check_screenshot(browser)
    browser.go("#rollout/1/0")
    assert browser.evaluate("document.querySelector('h1').textContent").startswith("broken-setup #0")
    assert browser.errors == []


def test_agent_text_is_shown_as_text_never_run(job_a: tuple[Path, str], browser: Browser, tmp_path: Path) -> None:
    """A completion holding markup and a closing script tag: shown literally; no script of it runs (the page's
    policy would report one as a console error)."""
    job, _ = job_a
    copy = tmp_path / "hostile"
    shutil.copytree(job, copy)
    summary = json.loads((copy / SUMMARY_FILE).read_text())
    folder = copy / next(r["folder"] for r in summary["rollouts"] if r["status"] == "ok")
    hostile = "</script><script>document.title='owned'</script><img src=x onerror=\"document.title='owned'\">"
    lines = (folder / "trace.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    record["response"]["choices"][0]["message"]["content"] = hostile
    (folder / "trace.jsonl").write_text("\n".join([*lines[:-1], json.dumps(record)]) + "\n")
    assert agentbake("report", str(copy)).returncode == 0
    browser.open(copy / REPORT_FILE)
    index = [r["folder"] for r in summary["rollouts"]].index(folder.name)
    browser.go(f"#rollout/0/{index}")
    assert hostile in browser.evaluate("document.getElementById('view').textContent")
    assert browser.evaluate("document.title") != "owned"
    assert browser.evaluate("document.querySelectorAll('#view img, #view script').length") == 0
    assert browser.errors == []


def test_a_job_with_no_finished_rollout_loads(tmp_path: Path, browser: Browser) -> None:
    """An interrupted job before its first result: the totals of nothing, no chart fails."""
    tasks = (JobTask(name="alpha", path=tmp_path / "alpha", digest="0" * 64),)
    runner = RunnerConfig(image="agentbake/claude-code:000000000000", oracle=True, out_dir=tmp_path / "job")
    job = Job.start(
        tmp_path / "job",
        JobConfig(runner=runner, backend=JobBackend(config=DockerConfig()), tasks=tasks, n_attempts=2, n_concurrent=1),
    )
    job.write_summary()
    done = agentbake("report", str(job.dir), "--json")
    assert json.loads(done.stdout) == {"report": str(job.dir / REPORT_FILE)}
    browser.open(job.dir / REPORT_FILE)
    assert cards(browser)["finished"] == (0, "0") and cards(browser)["total"] == (2, "2")
    assert cards(browser)["reward_mean"] == (None, "\u2013")
    assert browser.errors == []
