"""`agentbake report JOB_DIR [JOB_DIR2] [-o FILE]`: a job's report as one HTML file, or two jobs side by side."""

from __future__ import annotations

from pathlib import Path

import click

from agentbake.clikit import json_option, print_json


@click.command("report")
@click.argument(
    "job_dirs",
    nargs=-1,
    required=True,
    metavar="JOB_DIR [JOB_DIR2]",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The HTML file to write [default: JOB_DIR/report.html; two jobs: JOB_DIR/report-vs-<JOB_DIR2's name>.html].",
)
@json_option
def report_command(job_dirs: tuple[Path, ...], output: Path | None, as_json: bool) -> None:
    """Write the report of the job in JOB_DIR as one self-contained HTML file, and print its path.

    It shows totals, reward per task, reward over time, time per phase, failures by cause, and a page per rollout. With
    JOB_DIR2 the two jobs are compared side by side."""
    from agentbake.report.render import REPORT_FILE, write_report

    if len(job_dirs) > 2:
        raise click.UsageError("give one job directory, or two to compare them")
    if output is None:
        name = REPORT_FILE if len(job_dirs) == 1 else f"report-vs-{job_dirs[1].absolute().name}.html"
        output = job_dirs[0] / name
    path = write_report(list(job_dirs), output)
    if as_json:
        print_json({"report": str(path)})
    else:
        click.echo(path)
