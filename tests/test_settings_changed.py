"""Settings.changed: a variant of the settings (a remedy's `--optimizer-offload 1`, the planner's
offload retry) keeps what was and was not typed. megatron-core's ZeRO-3 prefetch is 1.0 and its
overlap.dp 0.9791: untyped, ZeRO-3 hides at 1.0; `dataclasses.replace` passed dp_overlap on as if
typed, and ZeRO-3 then hid at 0.9791 (the remedies' step ratios of ZeRO-3 layouts were off by it)."""

from __future__ import annotations

from dataclasses import replace

from llmpar.parallel import Settings


def test_changed_keeps_the_stack_values_untyped():
    s = Settings()
    assert (s.dp_overlap, s.zero3_overlap) == (0.9791, 1.0)
    c = s.changed(optimizer_offload=1.0)
    assert c.optimizer_offload == 1.0 and c.zero3_overlap == 1.0 and c.overrides() == {}
    # the trap it avoids
    assert replace(s, optimizer_offload=1.0).zero3_overlap == 0.9791
    # a typed value stays typed
    t = Settings(dp_overlap=0.5).changed(optimizer_offload=1.0)
    assert t.zero3_overlap == 0.5 and t.overrides() == {"dp_overlap": 0.5}
