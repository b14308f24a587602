"""The interactive attention viewer for a Hugging Face model and one input text.

:func:`explain_model` loads a local model directory (or takes a loaded model and its tokenizer),
runs it on attnkit (``attn_implementation="attnkit"``) with ``output_attentions=True`` — the
weights come from the engine's weights-on-demand path — and writes one self-contained HTML page
(:mod:`attnkit.interpret.viewer`) with every layer and head, labelled with the model's own tokens
(word pieces, ``[CLS]``, ``Ġ``-prefixed BPE pieces as the tokenizer writes them). The maps are
grouped as transformers groups them in its outputs, never guessed from shapes:

- an encoder (BERT, MiniLM) or a decoder-only model (GPT-2, Llama): self-attention ``[L, H, T, T]``;
- an encoder–decoder (T5, BART): the output is generated greedily, then the model is run once
  more teacher-forced on it; cross-attention ``[L, H, T, S]`` (rows: the decoder's inputs,
  columns: the source tokens), encoder ``[L, H, S, S]`` and decoder self-attention ``[L, H, T, T]``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.integrations.huggingface import guard
from attnkit.integrations.huggingface.attention import ATTN_IMPLEMENTATION
from attnkit.interpret.explain import slug
from attnkit.interpret.viewer import AttentionMap, write_viewer


def load_model(path: str | os.PathLike[str]) -> tuple[nn.Module, Any]:
    """A local Hugging Face model directory loaded on attnkit, with its tokenizer (no download:
    ``local_files_only``). An encoder–decoder comes with its generation head
    (``AutoModelForSeq2SeqLM``), any other model as ``AutoModel``, in eval mode.

    Only the model and tokenizer classes of the installed transformers are used: every load
    passes ``trust_remote_code=False``, and a directory that ships its own code for them
    (``auto_map`` in ``config.json`` or ``tokenizer_config.json``, naming a class transformers
    does not have) is refused before transformers could ask "run the custom code? [y/N]".

    Args:
        path: the model directory (``config.json``, weights, tokenizer files).

    Returns:
        ``(model, tokenizer)``.

    Raises:
        FileNotFoundError: no ``config.json`` in the directory.
        ValueError: the directory's code would have to run, or the model computes its
            attention outside transformers' attention interface (:mod:`.guard`).

    Example::

        >>> from transformers import BertConfig, BertModel
        >>> config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
        ...                     num_attention_heads=2, intermediate_size=32)
        >>> model = BertModel._from_config(config, attn_implementation="attnkit").eval()
        >>> import pathlib, tempfile
        >>> from transformers import BertTokenizer
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "vocab.txt").write_text(chr(10).join(
        ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "."]))
        >>> BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder) and None
        >>> model.save_pretrained(folder)
        >>> model, tokenizer = load_model(folder)
        >>> type(model).__name__, model.config._attn_implementation
        ('BertModel', 'attnkit')
    """
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

    directory = Path(path)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(
            f"{directory} is not a Hugging Face model directory (no config.json)"
        )
    _refuse_shipped_code(directory)
    _check_weights(directory)
    options = {"local_files_only": True, "trust_remote_code": False}
    config = AutoConfig.from_pretrained(directory, **options)
    auto = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModel
    try:
        # use_safetensors: never transformers' fallback to a pickled pytorch_model.bin
        model = auto.from_pretrained(
            directory, attn_implementation=ATTN_IMPLEMENTATION, use_safetensors=True, **options
        )
    except SafetensorError as error:  # damage _check_weights cannot see from the headers
        raise OSError(f"{directory}: its weights are damaged ({_first_line(error)})") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, **options)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ValueError(
            f"{directory}: its tokenizer cannot be loaded ({_first_line(error)})"
        ) from None
    _require_tokenizer_files(directory, tokenizer)
    return model.eval(), tokenizer


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


#: how weights are stored as a pickle, which ``torch.load`` unpickles (and a pickle can run code)
_PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle")
_SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")


def _check_weights(directory: Path) -> None:
    """Refuse weights attnkit would have to unpickle, and safetensors files whose header does
    not cover the file (a cut or extended download), naming the file.

    transformers loads ``pytorch_model.bin`` with ``torch.load(weights_only=True)``, but attnkit
    unpickles nothing at all: such a directory is refused with the way to convert it.
    """
    from safetensors import SafetensorError, safe_open

    try:
        named = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        named = {}  # transformers reports a damaged config itself
    explicit = named.get("transformers_weights") if isinstance(named, dict) else None
    pickled = sorted({p.name for pattern in _PICKLED for p in directory.glob(pattern)})
    if isinstance(explicit, str) and not explicit.endswith((".safetensors", ".index.json")):
        pickled = [explicit]
    elif any((directory / name).is_file() for name in _SAFETENSORS):
        pickled = []  # transformers loads the safetensors and never reads the pickle
    if pickled:
        raise ValueError(
            f"{directory} holds its weights as a pickle ({', '.join(pickled)}); attnkit never "
            "unpickles (a pickle can run code): convert them to model.safetensors where you "
            "trust the file (transformers' save_pretrained writes safetensors)"
        )
    for file in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(file, framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            raise OSError(
                f"{file}: damaged weights ({_first_line(error)}); a cut download or copy: "
                "fetch the file again"
            ) from None


def _require_tokenizer_files(directory: Path, tokenizer: Any) -> None:
    """Refuse a directory without the tokenizer's files: transformers then builds the model
    type's tokenizer with an empty vocabulary, and every word would be ``[UNK]``."""
    names = {"tokenizer.json", *getattr(tokenizer, "vocab_files_names", {}).values()}
    if not any((directory / name).is_file() for name in names):
        raise ValueError(
            f"{directory} has no tokenizer files (one of {', '.join(sorted(names))}); save "
            "the model's tokenizer there (tokenizer.save_pretrained) so its tokens can be shown"
        )


def _refuse_shipped_code(directory: Path) -> None:
    """Refuse a directory whose model or tokenizer exists only as its own Python code.

    transformers would ask on the terminal whether to run it (one ``y`` runs it); with
    ``trust_remote_code=False`` it refuses in a paragraph. A directory whose ``auto_map``
    names code but whose ``model_type`` (or tokenizer class) transformers has loads with
    transformers' own class, as ``trust_remote_code=False`` means, and is not refused.
    """
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for name in ("config.json", "tokenizer_config.json"):
        file = directory / name
        try:
            data = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # transformers reports a damaged file itself
        shipped = data.get("auto_map") if isinstance(data, dict) else None
        if not shipped:
            continue
        if name == "config.json":
            known = data.get("model_type") in CONFIG_MAPPING
        else:
            known = _known_tokenizer(data.get("tokenizer_class"))
        if not known:
            raise ValueError(
                f"{directory} ships its own Python code for its "
                f"{'model' if name == 'config.json' else 'tokenizer'} ({name} auto_map: "
                f"{_code_files(shipped)}); attnkit runs only the classes of the installed "
                "transformers and never a model directory's code"
            )


def _known_tokenizer(name: object) -> bool:
    import transformers

    return isinstance(name, str) and hasattr(transformers, name)


def _code_files(auto_map: object) -> str:
    """The ``.py`` files an ``auto_map`` points at, e.g. ``modeling_custom.py``."""
    refs: list[str] = []
    for value in auto_map.values() if isinstance(auto_map, dict) else [auto_map]:
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str):
                module = ref.split("--")[-1].rsplit(".", 1)[0]
                refs.append(f"{module}.py")
    return ", ".join(sorted(set(refs))) or repr(auto_map)


def explain_model(
    model: str | os.PathLike[str] | nn.Module,
    text: str,
    *,
    tokenizer: Any = None,
    output: str | os.PathLike[str] | None = None,
    max_new_tokens: int = 20,
) -> Path:
    """Write the attention viewer page of a Hugging Face model for ``text``.

    Args:
        model: a local model directory (``config.json``, weights, tokenizer files), or a loaded
            ``PreTrainedModel`` running ``attn_implementation="attnkit"``.
        text: the input, e.g. ``"The cat sat on the mat."``.
        tokenizer: the model's tokenizer; required with a loaded model, loaded from the
            directory otherwise.
        output: where to write the page; default ``explain-<slug of the text>.html`` in the
            current directory.
        max_new_tokens: an encoder–decoder's greedy output length limit.

    Returns:
        the path of the page (written atomically).

    Example::

        >>> from transformers import BertConfig, BertModel
        >>> config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
        ...                     num_attention_heads=2, intermediate_size=32)
        >>> model = BertModel._from_config(config, attn_implementation="attnkit").eval()
        >>> import pathlib, tempfile
        >>> from transformers import BertTokenizer
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "vocab.txt").write_text(chr(10).join(
        ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "."]))
        >>> BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder) and None
        >>> model.save_pretrained(folder)
        >>> explain_model(folder, "the cat sat .", output=folder / "page.html").name
        'page.html'
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"the input must be a non-empty str, got {text!r}")
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 1
    ):
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if isinstance(model, (str, os.PathLike)):
        name = Path(model).name
        model, loaded_tokenizer = load_model(model)
        tokenizer = tokenizer if tokenizer is not None else loaded_tokenizer
    else:
        if tokenizer is None:
            raise ValueError(
                "a loaded model needs its tokenizer: explain_model(model, text, tokenizer=...)"
            )
        name = type(model).__name__
    guard.check_model(model)
    config: Any = getattr(model, "config", None)
    implementation = getattr(config, "_attn_implementation", None)
    if implementation != ATTN_IMPLEMENTATION:
        raise ValueError(
            f"the model runs attn_implementation={implementation!r}; load it with "
            f'attn_implementation="{ATTN_IMPLEMENTATION}"'
        )
    maps = attention_maps(model, tokenizer, text, max_new_tokens=max_new_tokens)
    layers, heads = maps[0].weights.shape[:2]
    notes = [
        f"model: {config.model_type} ({type(model).__name__}), {layers} layers x {heads} heads, "
        "attention computed by attnkit's engine",
        "rows: query tokens, columns: key tokens, as the model's tokenizer writes them",
    ]
    path = Path(output) if output is not None else Path(f"explain-{slug(text)}.html")
    return write_viewer(
        path, maps, title=f"{name}: \u201c{text.strip()}\u201d", notes="\n".join(notes)
    )


def attention_maps(
    model: Any, tokenizer: Any, text: str, *, max_new_tokens: int = 20
) -> list[AttentionMap]:
    """The attention maps of ``model`` on ``text``, one :class:`AttentionMap` per role
    (module docstring), each ``[layers, heads, rows, columns]`` with the tokens as labels.

    Args:
        model: a Hugging Face model running ``attn_implementation="attnkit"``.
        tokenizer: its tokenizer.
        text: the input.
        max_new_tokens: an encoder–decoder's greedy output length limit.

    Returns:
        One :class:`~attnkit.interpret.AttentionMap` per role (self-attention; an
        encoder–decoder's encoder, decoder and cross-attention).

    Example::

        >>> from transformers import BertConfig, BertModel
        >>> config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
        ...                     num_attention_heads=2, intermediate_size=32)
        >>> model = BertModel._from_config(config, attn_implementation="attnkit").eval()
        >>> import pathlib, tempfile
        >>> from transformers import BertTokenizer
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "vocab.txt").write_text(chr(10).join(
        ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "."]))
        >>> BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder) and None
        >>> model.save_pretrained(folder)
        >>> model, tokenizer = load_model(folder)
        >>> [m.name for m in attention_maps(model, tokenizer, "the cat sat .")]
        ['self-attention']
    """
    device = next(model.parameters()).device
    inputs = tokenizer(text, return_tensors="pt").to(device)
    source = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    _check_input(model, inputs["input_ids"][0], source)
    with torch.no_grad():
        if getattr(model.config, "is_encoder_decoder", False):
            # BERT-style tokenizers add token_type_ids, which no encoder-decoder takes
            inputs = {k: inputs[k] for k in ("input_ids", "attention_mask") if k in inputs}
            generated = model.generate(
                **inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1
            )
            target = tokenizer.convert_ids_to_tokens(generated[0].tolist())
            out = model(**inputs, decoder_input_ids=generated, output_attentions=True)
            return [
                AttentionMap("cross-attention", _stack(out.cross_attentions), target, source),
                AttentionMap("encoder self-attention", _stack(out.encoder_attentions), source),
                AttentionMap("decoder self-attention", _stack(out.decoder_attentions), target),
            ]
        out = model(**inputs, output_attentions=True)
    return [AttentionMap("self-attention", _stack(out.attentions), source)]


def _check_input(model: Any, ids: Tensor, tokens: Sequence[str]) -> None:
    """Refuse token ids the model has no embedding for (a tokenizer of another model) and an
    input longer than the model's table of positions, before the model fails on them deep
    inside (``index out of range in self``, ``The size of tensor a (12) must match ...``)."""
    vocabulary = model.get_input_embeddings().num_embeddings
    beyond = (ids >= vocabulary).nonzero().flatten().tolist()
    if beyond:
        i = beyond[0]
        raise ValueError(
            f"the tokenizer does not belong to this model: it gives {tokens[i]!r} the id "
            f"{int(ids[i])}, and the model's vocabulary has {vocabulary} entries (ids 0 to "
            f"{vocabulary - 1})"
        )
    positions = _position_table(model)
    if positions is not None and len(ids) > positions:
        raise ValueError(
            f"the input is {len(ids)} tokens, longer than the model's {positions} positions; "
            f"shorten the input to at most {positions} tokens"
        )


def _position_table(model: nn.Module) -> int | None:
    """How many positions a model with a learned table of absolute positions can embed
    (``None`` without one: relative or rotary positions have no table to run out of).

    The table is an ``nn.Embedding`` named for positions (``position_embeddings``,
    ``embed_positions``, GPT-2's ``wpe``); rows up to its ``padding_idx`` hold no position
    (RoBERTa's start at ``padding_idx + 1``), and the configuration's limit counts too
    (BART's table has two rows more than its ``max_position_embeddings``).
    """
    config = getattr(model, "config", None)
    limits = [
        value
        for name in ("max_position_embeddings", "n_positions")
        if isinstance(value := getattr(config, name, None), int) and value > 0
    ]
    for name, module in model.named_modules():
        last = name.rsplit(".", 1)[-1]
        if isinstance(module, nn.Embedding) and ("position" in last or last == "wpe"):
            padding = module.padding_idx
            limits.append(module.num_embeddings - (0 if padding is None else padding + 1))
            return min(limits)
    return None


def _stack(layers: Sequence[Tensor | None] | None) -> Tensor:
    """``[L, H, R, C]`` of the one example from transformers' per-layer ``[1, H, R, C]``."""
    if not layers or any(w is None for w in layers):
        raise RuntimeError(
            "the model returned no attention weights with output_attentions=True "
            "(is it running attn_implementation='attnkit'?)"
        )
    return torch.stack([w[0].detach().float().cpu() for w in layers if w is not None])
