"""agentbake rollouts for TRL: GRPOTrainer's rollout_func and AsyncGRPOTrainer's session factory.

from agentbake.trl import RolloutFunction, RunnerSessions, task_dataset, trainer_model_settings, verifier_reward

See README.md beside this file: the contract, the multi-sequence rule, rewards, sampling and logprobs.
"""

from agentbake.trl.rollout import (
    INFRASTRUCTURE_FAILURES,
    REWARD_COLUMN,
    RolloutFunction,
    check_alignment,
    rollout_row,
    task_dataset,
    trainer_model_settings,
    unscored_reason,
    verifier_reward,
)
from agentbake.trl.sessions import (
    RunnerSessions,
    Session,
    SessionFactory,
    TrainingTrace,
    TrainingTurn,
    VerifyResult,
    check_worker_sampling,
    session_factory,
)

__all__ = [
    "INFRASTRUCTURE_FAILURES",
    "REWARD_COLUMN",
    "RolloutFunction",
    "RunnerSessions",
    "Session",
    "SessionFactory",
    "TrainingTrace",
    "TrainingTurn",
    "VerifyResult",
    "check_alignment",
    "check_worker_sampling",
    "rollout_row",
    "session_factory",
    "task_dataset",
    "trainer_model_settings",
    "unscored_reason",
    "verifier_reward",
]
