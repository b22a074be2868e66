"""One self-contained HTML file from one job or two, with style, script and data inline.

The page loads nothing (its Content-Security-Policy allows no fetch), and the same jobs give the same bytes. Each
rollout's detail is parsed only when its page opens, so a large job opens fast.
"""

from __future__ import annotations

import base64
import hashlib
from importlib.resources import files
from pathlib import Path

import jinja2

from agentbake.errors import ReportError
from agentbake.report.collect import JobData, Texts, read_job, script_json

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
    lines = [script_json(texts.table)]
    lines += [detail for job in jobs for detail in job.details]
    script = _script()
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
        data=script_json(data),
        details="\n".join(lines),
    )


SCRIPTS = ("common.js", "overview.js", "rollout.js", "report.js")
"""The page's script, in this order, as one function: common.js's helpers first, report.js's routing last."""


def _script() -> str:
    """The page's one script: the views draw every text of the jobs as text (textContent), never as HTML."""
    parts = [(_HERE / "templates" / name).read_text() for name in SCRIPTS]
    return '(function () {\n"use strict";\n' + "\n".join(parts) + "})();\n"


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
