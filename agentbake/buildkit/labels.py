"""The `dev.agentbake.*` labels on every image agentbake builds: one typed model, written here (render.py puts
`to_labels()` in the Dockerfile) and read back by the runner (`from_labels`), so both sides spell each label
once. Data flows one way: buildkit -> image -> runner.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentbake.errors import AgentError

LABEL_PREFIX = "dev.agentbake."


class ImageLabels(BaseModel):
    """What the harness needs to know about an image, as `agentbake build` labels it. Field names are the
    labels' names after `dev.agentbake.` with `.` and `-` as `_` (`agent.package` -> `agent_package`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    agent_name: str = Field(alias="agent.name")
    """The agent's display name (image.toml `[agent] name`, e.g. `Claude Code`)."""
    agent_package: str = Field(alias="agent.package")
    """The agent's npm package (`@anthropic-ai/claude-code`): which harness launches it."""
    agent_version: str = Field(alias="agent.version")
    """The agent version the lock pinned."""
    agent_command: str = Field(alias="agent.command")
    """The agent's executable on PATH (`claude`)."""
    spec_hash: str = Field(alias="spec-hash")
    """The image's content hash (its tag is its first 12 hex digits): the published manifest's key."""
    builder_version: str = Field(alias="builder-version")
    """The agentbake version that built the image."""
    user: str
    """The non-root user every agent command runs as."""
    uid: int
    """That user's uid."""
    home: str
    """That user's home directory."""
    python: str
    """The baked interpreter (the image's venv): runs the Docker relay and the in-sandbox gateway."""
    dir_workdir: str = Field(alias="dir.workdir")
    """Directory the agent works in."""
    dir_task: str = Field(alias="dir.task")
    """Directory the task's files (e.g. `solution/` for `--oracle`) are copied into."""
    dir_logs_agent: str = Field(alias="dir.logs_agent")
    """Directory the agent's logs go to and are collected from."""
    dir_logs_verifier: str = Field(alias="dir.logs_verifier")
    """The image's verifier log directory (never read for the reward: the agent can write there)."""
    git: str | None = None
    """The git the harness snapshots and diffs the workdir with; absent (catalog images): `git` on PATH. A
    task's runnable image names the agent bundle's (agentbake.tasks.runnable)."""

    @staticmethod
    def key(name: str) -> str:
        """The full label of a field (`user` -> `dev.agentbake.user`)."""
        field = ImageLabels.model_fields[name]
        return LABEL_PREFIX + (field.alias or name)

    @staticmethod
    def path_keys() -> dict[str, str]:
        """The full `dir.*` labels by short name (`workdir` -> `dev.agentbake.dir.workdir`)."""
        return {
            field.alias.removeprefix("dir."): LABEL_PREFIX + field.alias
            for field in ImageLabels.model_fields.values()
            if field.alias and field.alias.startswith("dir.")
        }

    @property
    def paths(self) -> dict[str, str]:
        """The `dir.*` labels by short name (`workdir`, `task`, `logs_agent`, `logs_verifier`)."""
        return {short: getattr(self, "dir_" + short) for short in self.path_keys()}

    def to_labels(self) -> dict[str, str]:
        """The labels to put on the image, `dev.agentbake.` included."""
        dumped = self.model_dump(by_alias=True, exclude_none=True)
        return {LABEL_PREFIX + key: str(value) for key, value in dumped.items()}

    @classmethod
    def from_labels(cls, image: str, labels: Mapping[str, str]) -> ImageLabels:
        """Read an image's labels (other labels are ignored); AgentError naming the image and every label that
        is missing or malformed."""
        ours = {key.removeprefix(LABEL_PREFIX): value for key, value in labels.items() if key.startswith(LABEL_PREFIX)}
        wanted = [field.alias or name for name, field in cls.model_fields.items()]
        required = [field.alias or name for name, field in cls.model_fields.items() if field.is_required()]
        missing = [LABEL_PREFIX + key for key in required if not ours.get(key)]
        if missing:
            raise AgentError(
                f"image {image!r} lacks the label(s) {', '.join(missing)}: it was not built by agentbake "
                "(build it with `agentbake build <name>`)"
            )
        try:
            return cls.model_validate({key: ours[key] for key in wanted if ours.get(key)})
        except ValidationError as exc:
            bad = "; ".join(f"{LABEL_PREFIX}{error['loc'][0]}: {error['msg']}" for error in exc.errors())
            raise AgentError(
                f"image {image!r} has malformed label(s): {bad}; rebuild it with `agentbake build`"
            ) from None
