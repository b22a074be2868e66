"""One self-contained HTML file from one job or two: a Jinja2 template holding the style, the script and the
data inline. The page loads nothing (its Content-Security-Policy allows no fetch, and only its own script by
hash); the same jobs always give the same bytes.

The overview's data is one JSON object parsed at load. Each rollout's detail is one line of a JSON Lines
block the browser does not parse until a rollout's page is opened, so a job of many rollouts opens fast.
"""

from __future__ import annotations

import base64
import hashlib
from importlib.resources import files
from pathlib import Path

import jinja2
import orjson

from agentbake.errors import ReportError
from agentbake.report.collect import JobData, Texts, read_job

_HERE = files("agentbake.report")
REPORT_FILE = "report.html"
"""The report's name in its job directory (`agentbake rollout` writes it there)."""


def report_html(job_dirs: list[Path]) -> str:
    """The report of one job, or the side-by-side comparison of two."""
    texts = Texts()
    jobs = [read_job(directory, texts) for directory in job_dirs]
    return render(jobs, texts)


def render(jobs: list[JobData], texts: Texts) -> str:
    data = {"jobs": [job.overview for job in jobs]}
    lines = [_script_json(texts.table)]
    lines += [_script_json(detail) for job in jobs for detail in job.details]
    script = (_HERE / "templates" / "report.js").read_text()
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return environment.get_template("report.html.j2").render(
        title=" vs ".join(job.overview["name"] for job in jobs),
        style=(_HERE / "templates" / "report.css").read_text(),
        script=script,
        script_hash=base64.b64encode(hashlib.sha256(script.encode()).digest()).decode(),
        data=_script_json(data),
        details="\n".join(lines),
    )


def write_report(job_dirs: list[Path], out: Path) -> Path:
    """Write the report of `job_dirs` to `out` (whole or not at all); returns `out`."""
    html = report_html(job_dirs)
    partial = out.with_name(f".{out.name}.partial")
    try:
        partial.write_text(html)
        partial.replace(out)
    except OSError as exc:
        raise ReportError(f"{out}: cannot write the report ({exc.strerror}); choose another file with -o") from None
    return out


def _script_json(value: object) -> str:
    """JSON safe inside a <script> element: `<` only ever appears inside strings, where \\u003c means the same."""
    return orjson.dumps(value).decode().replace("<", "\\u003c")
