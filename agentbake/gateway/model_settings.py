"""`ModelSettings`: what the gateway changes in agents' requests for the served model's sake.

`RunnerConfig` holds one. It lives apart so an oracle run, which has no gateway, never imports `GatewayConfig`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from agentbake.gateway.settings import MODEL_SETTINGS, TOOL_CALL_PARSERS


class _FrozenSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("tool_call_parser", mode="before", check_fields=False)
    @classmethod
    def _known_parser(cls, value: Any) -> Any:
        if value not in TOOL_CALL_PARSERS:
            raise ValueError(
                f"{value!r} is not a parser token-in has; expected one of {', '.join(TOOL_CALL_PARSERS)} "
                "(the server's vLLM --tool-call-parser)"
            )
        return value


# Built from the plain table in settings.py (types, defaults, bounds, help), which `agentbake run --help` reads
# without pydantic: one home for each field.
ModelSettings = create_model(
    "ModelSettings",
    __base__=_FrozenSettings,
    __module__=__name__,
    __doc__="""What the gateway changes in agents' requests for the served model's sake: its chat template's quirks
    and the sampling a trainer needs. `RunnerConfig.model_settings` passes them to every rollout's gateway. Its
    fields and their docs: `agentbake.gateway.settings.MODEL_SETTINGS`.""",
    **{
        name: (setting.annotation, Field(default=setting.default, description=setting.help, **setting.bounds))
        for name, setting in MODEL_SETTINGS.items()
    },
)
