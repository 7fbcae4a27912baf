"""From a plan to a launch (docs/launch.md): the chosen layout in a framework's own syntax.

:func:`emit` writes Megatron-LM arguments, NeMo 2 recipe overrides, a torchtitan TOML or a DeepSpeed
JSON for one layout,
refusing a knob the framework cannot express with the reason. Every option name it writes is
checked by tests/test_launch.py against the framework's own argument definitions at a pinned
commit (``launch/flags/*.txt``, each with its source), so a renamed flag fails the suite.
"""

from __future__ import annotations

FRAMEWORKS = ("megatron", "nemo", "torchtitan", "deepspeed")


def emit(framework: str, model, hw, settings, par, *, global_batch: int, seq: int) -> str:
    """The launch configuration for ``par`` (a scalar :class:`llmpar.parallel.Parallel`)."""
    from llmpar.errors import UserError

    if getattr(settings, "finetune", "full") != "full" and framework != "nemo":
        # none of the three frameworks' own configs adds adapters: Hugging Face PEFT, torchtune and NeMo do
        raise UserError(f"--emit {framework}: --finetune {settings.finetune} adapters are not a {framework} option "
                        "(Hugging Face PEFT, torchtune and NeMo configure LoRA/QLoRA; --emit nemo writes NeMo's); the "
                        "layout's degrees, batch and recompute are in `llmpar plan`'s output")
    if framework == "megatron":
        from llmpar.launch.megatron import emit as f
    elif framework == "nemo":
        from llmpar.launch.nemo import emit as f
    elif framework == "torchtitan":
        from llmpar.launch.torchtitan import emit as f
    elif framework == "deepspeed":
        from llmpar.launch.deepspeed import emit as f
    else:
        raise UserError(f"--emit {framework!r}: choose one of {', '.join(FRAMEWORKS)}")
    return f(model, hw, settings, par, global_batch=global_batch, seq=seq)
