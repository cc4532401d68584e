"""GSPO's sequence-level ratio with a token-sum aggregation is refused at config time
(verl refuses it, TRL warns): the error names both fields."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trainer.config import TrainConfig, format_errors


def test_gspo_with_a_token_sum_is_refused_naming_both_fields():
    with pytest.raises(ValidationError) as err:
        TrainConfig.model_validate(
            {"algorithm": {"preset": "gspo", "agg": "seq_mean_token_sum_norm"}}
        )
    lines = format_errors(err.value)
    assert [line.split(":")[0] for line in lines] == ["algorithm.loss", "algorithm.agg"]
    assert "seq_mean_token_sum_norm" in lines[0]


def test_the_gspo_loss_on_a_token_sum_preset_is_refused_too():
    with pytest.raises(ValidationError, match="algorithm.agg"):
        TrainConfig.model_validate({"algorithm": {"preset": "dr_grpo", "loss": "gspo"}})


@pytest.mark.parametrize("agg", ["seq_mean_token_mean", "token_mean"])
def test_gspo_with_a_per_sequence_or_token_mean_is_accepted(agg):
    cfg = TrainConfig.model_validate({"algorithm": {"preset": "gspo", "agg": agg}})
    assert cfg.algorithm.agg == agg
