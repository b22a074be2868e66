"""A solve.sh cut into steps, one shell-tool call each, that play as one bash running the file would.

Steps are the script's blank-line-separated blocks, never cut inside a compound command. Each step writes its block to a
private folder and runs it with `play_step.bash`, which restores what earlier steps left. So a fresh shell per call and
one that keeps its directory give the same result. A step that ends the script prints `END_MARK` on stderr.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from agentbake.errors import TaskError
from agentbake.scripted.solution_files import SOLUTION_DIR, SolutionFiles, heredoc_delimiter, placing_lines

PLAYER = Path(__file__).with_name("play_step.bash")
"""The bash script each step runs (restore the state, run the block, save the state)."""
_FOLDER = "agentbake-solve-"
END_MARK = re.compile(r"(agentbake-solve-[0-9a-f]{12}): solve\.sh ended (in|before) this step \(exit (\d+)\)")
"""What the player prints on stderr when the script has ended: its folder, `in` (this step ended it) or
`before` (an earlier one did, or was killed), and the exit status."""


def state_folder(script: str) -> str:
    """The folder's name under the temp dir: from the script's text, so the same script gets the same commands."""
    return _FOLDER + hashlib.sha256(script.encode()).hexdigest()[:12]


def solution_steps(
    script: str,
    *,
    files: SolutionFiles | None = None,
    solution_dir: str = SOLUTION_DIR,
) -> list[str]:
    """The shell commands that play a solve.sh, one per blank-line block; the first also places `files` (the
    task's solution/, `solution_files.read_solution_files`) at `solution_dir`."""
    lines = script.splitlines()
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    blocks = [block for block in _blocks(lines) if not all(_is_comment(line) for line in block)]
    folder = state_folder(script)
    steps = []
    for number, block in enumerate(blocks, 1):
        head = [f"S=${{TMPDIR:-/tmp}}/{folder}"]
        if number == 1:
            head += _first_lines(folder, files or SolutionFiles({}), solution_dir)
        steps.append(
            "\n".join([*head, _write('"$S/step"', "\n".join(block) + "\n"), f'bash "$S/run" {number} {len(blocks)}'])
        )
    return steps


def _first_lines(folder: str, files: SolutionFiles, solution_dir: str) -> list[str]:
    """What only the first step does: a fresh state folder with the player, and the solution files.

    No `rm -f`, which Codex refuses outside here-documents; mkdir fails if rm could not clear the folder."""
    lines = ['rm -r -- "$S" 2>/dev/null; mkdir -m 700 -- "$S" && ' + _write('"$S/run"', PLAYER.read_text())]
    return lines + placing_lines(files, folder, solution_dir)


def _write(path: str, text: str) -> str:
    """A command writing `text` to `path` verbatim: a quoted here-document with a delimiter no line of it is."""
    delimiter = heredoc_delimiter(text)
    return f"cat > {path} <<'{delimiter}'\n{text}{delimiter}"


def without_substitution(command: str) -> str:
    """`command`, or `eval` of it single-quoted when it holds `$(`, a backtick, `<(` or `>(` outside single quotes.

    Gemini CLI refuses such a command, judging by those characters alone."""
    return f"eval {shlex.quote(command)}" if _substitutes(command) else command


def _substitutes(command: str) -> bool:
    """Whether Gemini CLI's check sees a command substitution: its quote tracking, which knows no here-document."""
    single = double = False
    i = 0
    while i < len(command):
        char, after = command[i], command[i + 1 : i + 2]
        if char == "'" and not double:
            single = not single
        elif char == '"' and not single:
            double = not double
        elif single:
            pass
        elif char == "\\" and after and (not double or after in '$`"\\\n'):
            i += 1
        elif (char == "$" and after == "(") or (char in "<>" and after == "(" and not double) or char == "`":
            return True
        i += 1
    return False


def _is_comment(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith("#")


def _blocks(lines: list[str]) -> list[list[str]]:
    """Cut at blank lines where the text so far parses as whole commands."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in lines:
        if not line.strip() and current and _complete("\n".join(current)):
            blocks.append(current)
            current = []
        elif line.strip() or current:
            current.append(line)
    if current:
        blocks.append(current)
    return blocks


def _complete(text: str) -> bool:
    """Whether bash parses `text` as whole commands: no open quote, `if`, loop, brace or here-document."""
    bash = shutil.which("bash")
    if bash is None:
        raise TaskError("bash is not on PATH: the scripted model needs it to cut solve.sh into steps")
    # extglob on: a pattern like !(*.log) parses as a block of a script that turned it on earlier would.
    result = subprocess.run([bash, "-O", "extglob", "-n"], input=text, capture_output=True, text=True, check=False)
    # An unterminated here-document is only a warning to bash -n (status 0).
    return result.returncode == 0 and "here-document" not in result.stderr
