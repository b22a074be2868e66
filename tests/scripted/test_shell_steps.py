"""solve.sh played step by step, each step's command run by real bash in a fresh shell (as OpenCode's and Pi's
bash tools run a call; Claude Code's only keeps its directory, which the steps never change): the output,
exit status and files are those of `bash solve.sh`."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentbake.scripted import SolutionPolicy, solution_steps
from agentbake.scripted.shell_steps import END_MARK, state_folder, without_substitution

STATEFUL = """#!/bin/bash
set -euo pipefail
shopt -s extglob
umask 077
IMG_PATH="$PWD/images/cat one.png"
export GREETING="hello there"
declare -A sizes=([small]=1 [big]="2 3")
mkdir -p work/sub
cd work
greet() { echo "greet $1: $GREETING"; }
trap 'echo "the EXIT trap ran once, in $PWD"' EXIT

# the state of the block above: variables, the directory, a function, options
echo "img=$IMG_PATH big=${sizes[big]} in ${PWD##*/}"
greet "$(basename "$IMG_PATH")"
bash -c 'echo "a child sees $GREETING"'
touch a.txt b.log
echo !(*.log)
[[ $- == *e* ]] && [[ -o pipefail ]] && [[ -o nounset ]] && echo "set -euo pipefail still on"
cat > notes.txt <<'EOF'
a here-document

across a blank line, $NOT_EXPANDED
EOF
cd sub

python3 - <<EOF
import os
print("umask", oct(os.umask(0)), "in", os.path.basename(os.getcwd()))

print("expanded", "$GREETING")
EOF
echo "x" > private.txt
"""


@dataclass
class Played:
    stdout: str
    stderr: str
    status: int
    statuses: list[int]


def play(script: str, workdir: Path, tmp: Path) -> Played:
    """Each step's command in a fresh `bash -c` in the workdir, as an agent's shell tool runs it."""
    env = {**os.environ, "TMPDIR": str(tmp)}
    out, err, statuses = "", "", []
    for command in solution_steps(script):
        result = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True)
        out, err = out + result.stdout, err + result.stderr
        statuses.append(result.returncode)
    return Played(out, err, statuses[-1], statuses)


def run_whole(script: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    (workdir.parent / "solve.sh").write_text(script)
    return subprocess.run(["bash", "../solve.sh"], cwd=workdir, capture_output=True, text=True)


def without_marks(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(keepends=True) if not END_MARK.search(line))


def files(root: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(root)): (p.read_text(), p.stat().st_mode & 0o777)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@dataclass
class Compared:
    played: Played
    whole: subprocess.CompletedProcess[str]
    played_files: dict[str, tuple[str, int]]
    whole_files: dict[str, tuple[str, int]]


@pytest.fixture
def compare(tmp_path: Path):
    """compare(script): `bash solve.sh` in a fresh workdir, then the steps in a fresh one at the same path."""
    workdir, tmp = tmp_path / "w", tmp_path / "tmp"

    def run(script: str) -> Compared:
        workdir.mkdir()
        whole = run_whole(script, workdir)
        whole_files = files(workdir)
        shutil.rmtree(workdir)
        workdir.mkdir()
        tmp.mkdir(exist_ok=True)
        played = play(script, workdir, tmp)
        return Compared(played, whole, files(workdir), whole_files)

    return run


def test_state_carries_from_step_to_step_as_in_one_bash(compare, tmp_path: Path):
    c = compare(STATEFUL)
    assert len(solution_steps(STATEFUL)) == 3 and c.whole.returncode == 0, c.whole.stderr
    assert (c.played.stdout, c.played.stderr, c.played.status) == (c.whole.stdout, c.whole.stderr, 0)
    assert "set -euo pipefail still on" in c.played.stdout and "umask 0o77 in sub" in c.played.stdout
    assert c.played.stdout.count("the EXIT trap ran once") == 1 and c.played.stdout.endswith("/w/work/sub\n")
    assert c.played_files == c.whole_files and c.played_files["work/sub/private.txt"] == ("x\n", 0o600)
    assert "across a blank line, $NOT_EXPANDED" in c.played_files["work/notes.txt"][0]
    # The state lives in a private folder of the agent's temp dir; the workdir holds only what solve.sh made.
    (folder,) = (tmp_path / "tmp").iterdir()
    assert folder.name == state_folder(STATEFUL) and folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    ("script", "status"),
    [
        ("echo one\n\nexit 3\n\necho never > never.txt\n", 3),
        ("set -e\necho one\n\necho two; false; echo not this\n\necho never > never.txt\n", 1),
        # A function's failure under set -e, and an EXIT trap that still runs when the script stops there.
        ("set -e\ntrap 'echo trap' EXIT\nf() { return 4; }\n\nf\necho not this\n\necho never > never.txt\n", 4),
    ],
    ids=["exit", "set-e", "set-e-in-a-function"],
)
def test_a_step_that_ends_the_script_ends_it_for_the_rest(compare, tmp_path: Path, script: str, status: int, make_task):
    c = compare(script)
    assert c.whole.returncode == status and c.played.statuses == [0, status, status]
    assert (c.played.stdout, without_marks(c.played.stderr)) == (c.whole.stdout, c.whole.stderr)
    assert "never.txt" not in c.played_files and c.played_files == c.whole_files
    folder = state_folder(script)
    assert c.played.stderr.splitlines()[-2:] == [
        f"{folder}: solve.sh ended in this step (exit {status}); the steps after it do not run",
        f"{folder}: solve.sh ended before this step (exit {status}); it does not run",
    ]
    # The policy reads that from the tool result and ends the turn instead of sending the last step.
    policy = SolutionPolicy([make_task("ends", "End early.", script)])
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    messages: list[dict] = [{"role": "user", "content": "End early."}]
    for number, step in enumerate(solution_steps(script)[:2]):
        assert policy({"messages": messages, "tools": [BASH]}).tool_calls == [("bash", {"command": step})]
        result = subprocess.run(["bash", "-c", step], cwd=tmp_path / "w", env=env, text=True, capture_output=True)
        call = {"id": f"c{number}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": result.stdout + result.stderr},
        ]
    assert policy({"messages": messages, "tools": [BASH]}).text == (
        f"Stopped: the reference solution of ends ended at step 2 (exit {status})."
    )


def test_a_step_killed_before_it_finished_ends_the_script(tmp_path: Path, make_task):
    """As a tool's timeout does: here the step kills its player (its parent) and itself; nothing is saved."""
    script = "A=1\n\nkill -9 $PPID $$\n\necho never > never.txt\n"
    (tmp_path / "tmp").mkdir()
    played = play(script, tmp_path, tmp_path / "tmp")
    assert played.statuses[0] == 0 and played.statuses[2] == 137 and not (tmp_path / "never.txt").exists()
    assert played.stderr == f"{state_folder(script)}: solve.sh ended before this step (exit 137); it does not run\n"
    policy = SolutionPolicy([make_task("killed", "Die.", script)])
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    messages = [{"role": "user", "content": "Die."}]
    for content in ("", "", played.stderr):
        messages += [{"role": "assistant", "tool_calls": [call]}, {"role": "tool", "content": content}]
    reply = policy({"messages": messages, "tools": [BASH]})
    assert reply.text == "Stopped: the reference solution of killed ended before step 3 (exit 137)."


BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


def test_a_failing_last_command_without_set_e_does_not_stop_the_script(compare):
    c = compare("echo one\nfalse\n\nls does-not-exist\n\necho three\n")
    assert c.played.statuses == [1, 2, 0] and c.whole.returncode == 0
    assert (c.played.stdout, c.played.stderr) == (c.whole.stdout, c.whole.stderr)
    assert c.played.stdout == "one\nthree\n"


def test_xtrace_shows_the_script_and_nothing_of_the_player(compare):
    c = compare("set -x\nA=1\n\necho $A\ncd /\n\nset +x\necho quiet\n")
    assert (c.played.stdout, c.played.stderr, c.played.status) == (c.whole.stdout, c.whole.stderr, 0)
    assert c.played.stderr == "+ A=1\n+ echo 1\n+ cd /\n+ set +x\n"


def test_a_script_that_empties_path_still_carries_its_state(compare):
    """Saving the state runs builtins only."""
    c = compare("set -e\nPATH=/nowhere\ntrap 'echo trap' EXIT\n\necho \"$PATH\"\n\necho last\n")
    assert (c.played.stdout, c.played.stderr, c.played.statuses) == ("/nowhere\nlast\ntrap\n", "", [0, 0, 0])
    assert c.whole.stdout == c.played.stdout


def test_blocks_are_cut_at_blank_lines_outside_heredocs_quotes_and_compound_commands():
    script = (
        "#!/bin/bash\n# a comment-only block\n\n\n"
        'if true; then\n  echo a\n\n  echo b\nfi\n\npython3 -c "\nprint(1)\n\nprint(2)\n"\n\n'
        "cat <<-'E' <<<ignored\n\tx\n\n\tE\n\ncat <<< here-string\n\necho # <<EOF in a comment\n\necho last\n"
    )
    steps = solution_steps(script)
    blocks = [step.split("<<'AGENTBAKE_END'\n")[-1].split("\nAGENTBAKE_END\n")[0] for step in steps]
    assert blocks == [
        "if true; then\n  echo a\n\n  echo b\nfi",
        'python3 -c "\nprint(1)\n\nprint(2)\n"',
        "cat <<-'E' <<<ignored\n\tx\n\n\tE",
        "cat <<< here-string",
        "echo # <<EOF in a comment",
        "echo last",
    ]
    assert [step.splitlines()[-1] for step in steps] == [f'bash "$S/run" {n} 6' for n in range(1, 7)]


def test_a_block_holding_the_delimiter_line_is_written_verbatim(compare):
    c = compare("cat > f.txt <<'AGENTBAKE_END'\nAGENTBAKE_END_\nAGENTBAKE_END\n\ncat f.txt\n")
    assert c.played.stdout == c.whole.stdout == "AGENTBAKE_END_\n" and c.played.statuses == [0, 0]


@pytest.mark.parametrize(
    ("command", "wrapped"),
    [
        ("echo hi > a.txt", False),
        ("echo '$(id)' '`x`'", False),
        ("echo \\$(id) \\`x\\`", False),
        ('echo "<(a)"', False),
        ("echo $(id)", True),
        ('echo "$(id)"', True),
        ("echo `id`", True),
        ("diff <(a) b", True),
        ("echo 'it'\\''s' $(id)", True),
        ("cat <<'E'\n$(x)\nE", True),  # a quoted here-document is no quote to Gemini CLI
    ],
)
def test_a_command_with_a_substitution_outside_single_quotes_goes_as_eval(command: str, wrapped: bool) -> None:
    sent = without_substitution(command)
    assert (sent != command) is wrapped and without_substitution(sent) == sent
    if wrapped:
        assert sent == f"eval {shlex.quote(command)}"
