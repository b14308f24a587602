"""Adapters from attnkit to other libraries (the layer after interpret and evaluate).

* :mod:`attnkit.integrations.huggingface`: Hugging Face ``transformers`` models run their attention
  on attnkit's engine (``attn_implementation="attnkit"``), so recording, rollout, flow, head
  importance, ablation and the viewer work on them; converters to attnkit's own layers.

Each adapter imports its library when it is imported itself: ``import attnkit`` never needs them.
"""
