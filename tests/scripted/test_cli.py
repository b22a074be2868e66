"""`agentbake scripted-llm` as a real process, answered through the official OpenAI SDK."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import openai
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.scripted import solution_steps

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def test_scripted_llm_serves_the_tasks_and_stops_on_sigterm():
    agentbake = Path(sys.executable).with_name("agentbake")
    args = [str(agentbake), "scripted-llm", "--path", str(EXAMPLES), "--port", "0", "--json"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started = json.loads(process.stdout.readline())
        assert started["tasks"] == [
            "fix-failing-test",
            "fix-inventory",
            "multi-step-report",
            "summarize-logs",
            "write-file",
        ]
        client = openai.OpenAI(base_url=started["openai_base_url"], api_key="unused", max_retries=0)
        instruction = (EXAMPLES / "write-file" / "instruction.md").read_text()
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "bash",
                    "parameters": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                        "required": ["command"],
                    },
                },
            }
        ]
        completion = client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": instruction}], tools=tools
        )
        (call,) = completion.choices[0].message.tool_calls
        solve = (EXAMPLES / "write-file" / "solution" / "solve.sh").read_text()
        command = json.loads(call.function.arguments)["command"]
        assert call.function.name == "bash" and [command] == solution_steps(solve)
        assert [m.id for m in client.models.list()] == ["scripted"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)
    assert process.returncode == 0


def test_a_bad_task_directory_is_a_clean_error(tmp_path: Path):
    result = CliRunner().invoke(main, ["scripted-llm", "--path", str(tmp_path)])
    assert result.exit_code == 1 and "neither a task (no instruction.md) nor a folder of tasks" in result.output
